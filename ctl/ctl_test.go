package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// testNow is the fixed clock of the golden outputs.
var testNow = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

var testEnv = env{now: func() time.Time { return testNow }, loc: time.UTC}

// fakeMaster serves canned answers and records what it was asked.
type fakeMaster struct {
	pb.UnimplementedMasterServiceServer

	mu       sync.Mutex
	pm       *pb.PartitionMap
	events   []*pb.Event
	err      error // returned by every unary operation when set
	notLead  bool  // answer NOT_LEADER to everything
	requests []any
	// followBreak makes a followed Events stream fail with NOT_LEADER once
	// after sending the backlog, to exercise resuming.
	followBreak bool
	breakAfter  time.Duration // how long the first followed stream idles before breaking
	later       []*pb.Event   // sent to a resumed follower
	sinceSeen   []uint64
}

func (f *fakeMaster) record(req any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if f.notLead {
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "master: not the leader", nil)
	}
	return f.err
}

func (f *fakeMaster) lastRequest() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return nil
	}
	return f.requests[len(f.requests)-1]
}

func (f *fakeMaster) GetPartitionMap(_ context.Context, req *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	f.mu.Lock()
	notLead := f.notLead
	f.mu.Unlock()
	if notLead {
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "master: not the leader", nil)
	}
	return f.pm, nil
}

func (f *fakeMaster) Events(req *pb.EventsRequest, stream pb.MasterService_EventsServer) error {
	if err := f.record(req); err != nil {
		return err
	}
	f.mu.Lock()
	f.sinceSeen = append(f.sinceSeen, req.GetSinceSeq())
	first := len(f.sinceSeen) == 1
	all := append(append([]*pb.Event{}, f.events...), f.later...)
	brk, idle := f.followBreak, f.breakAfter
	f.mu.Unlock()
	send := f.events
	if !first {
		send = all
	}
	for _, e := range send {
		if e.GetSeq() >= req.GetSinceSeq() {
			if err := stream.Send(e); err != nil {
				return err
			}
		}
	}
	if !req.GetFollow() {
		return nil
	}
	if first && brk {
		select {
		case <-stream.Context().Done():
			return nil
		case <-time.After(idle):
		}
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "master: not the leader", nil)
	}
	<-stream.Context().Done()
	return nil
}

func (f *fakeMaster) Split(_ context.Context, req *pb.SplitRequest) (*pb.SplitResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	reps := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
	resp := &pb.SplitResponse{
		Left:  &pb.RangeDescriptor{RangeId: 1, Table: req.GetTable(), TableId: 1, End: req.GetPartitionKey(), Generation: 2, Replicas: reps},
		Right: &pb.RangeDescriptor{RangeId: 5, Table: req.GetTable(), TableId: 1, Start: req.GetPartitionKey(), Generation: 1, Replicas: reps},
	}
	if req.GetInGroup() {
		// Both halves name range 1's group, as the partition server's
		// in-group split records them.
		resp.Left.GroupId, resp.Right.GroupId = 1, 1
	}
	return resp, nil
}

func (f *fakeMaster) Merge(_ context.Context, req *pb.MergeRequest) (*pb.MergeResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &pb.MergeResponse{Range: &pb.RangeDescriptor{RangeId: req.GetRangeId(), Table: "orders", TableId: 1, Generation: 3,
		Replicas: []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}}}, nil
}

func (f *fakeMaster) Move(_ context.Context, req *pb.MoveRequest) (*pb.MoveResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &pb.MoveResponse{Range: &pb.RangeDescriptor{RangeId: req.GetRangeId(), Table: "orders", TableId: 1, Start: "m", Generation: 4,
		Replicas: []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: req.GetToServerId()}}}}, nil
}

func (f *fakeMaster) TransferLeader(_ context.Context, req *pb.MasterTransferLeaderRequest) (*pb.MasterTransferLeaderResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &pb.MasterTransferLeaderResponse{}, nil
}

// startFake serves f on a loopback port and returns its address.
func startFake(t *testing.T, f *fakeMaster) string {
	t.Helper()
	return serveMaster(t, f)
}

// serveMaster serves a master service on a loopback port and returns its
// address.
func serveMaster(t *testing.T, f pb.MasterServiceServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterMasterServiceServer(s, f)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// sampleMap is a two-table map: orders split in two with load, logs with
// no load report yet, four servers of which one is down.
func sampleMap() *pb.PartitionMap {
	reps := func(ids ...string) []*pb.Replica {
		var out []*pb.Replica
		for _, id := range ids {
			out = append(out, &pb.Replica{ServerId: id})
		}
		return out
	}
	hb := func(ago time.Duration) int64 { return testNow.Add(-ago).UnixNano() }
	return &pb.PartitionMap{
		Version: 7,
		Tables:  []*pb.Table{{Name: "orders", TableId: 1}, {Name: "logs", TableId: 2}},
		Ranges: []*pb.RangeDescriptor{
			{RangeId: 4, GroupId: 4, Table: "orders", TableId: 1, Start: "p0050", Generation: 1, Replicas: reps("ps2", "ps3", "ps10")},
			{RangeId: 1, Table: "orders", TableId: 1, End: "p0050", Generation: 2, Replicas: reps("ps1", "ps2", "ps3")},
			{RangeId: 2, Table: "logs", TableId: 2, Generation: 1, Replicas: reps("ps1", "ps2", "ps3")},
		},
		Servers: []*pb.ServerInfo{
			{ServerId: "ps10", GrpcAddr: "127.0.0.1:7210", RaftAddr: "127.0.0.1:7310"},
			{ServerId: "ps2", GrpcAddr: "127.0.0.1:7202", RaftAddr: "127.0.0.1:7302", Zone: "eu-west-1b", Alive: true, LastHeartbeatUnixNano: hb(300 * time.Millisecond),
				ClockSkewed: true, ClockOffsetNanos: int64(45 * time.Second),
				DiskSpace: &pb.DiskSpace{AvailableBytes: 100 << 20, CapacityBytes: 100 << 30, ReserveBytes: 256 << 20}},
			{ServerId: "ps1", GrpcAddr: "127.0.0.1:7201", RaftAddr: "127.0.0.1:7301", Zone: "eu-west-1a", Alive: true, LastHeartbeatUnixNano: hb(1200 * time.Millisecond),
				DiskSpace: &pb.DiskSpace{AvailableBytes: 50 << 30, CapacityBytes: 100 << 30, ReserveBytes: 256 << 20}},
			{ServerId: "ps3", GrpcAddr: "127.0.0.1:7203", RaftAddr: "127.0.0.1:7303", Alive: false, LastHeartbeatUnixNano: hb(9 * time.Second),
				DiskSpace: &pb.DiskSpace{AvailableBytes: 3 << 30, CapacityBytes: 100 << 30, ReserveBytes: 256 << 20}},
		},
		Leaders: map[uint64]string{1: "ps1", 4: "ps2", 2: "ps1"},
		Loads: map[uint64]*pb.RangeLoad{
			1: {ReadsPerSec: 12.5, WritesPerSec: 1800, EntitiesPerSec: 1812.5, EntityCount: 52000, Bytes: 60 << 20,
				HotKeys: []*pb.KeyLoad{{PartitionKey: "p0001", EntitiesPerSec: 400}, {PartitionKey: "p0007", EntitiesPerSec: 900},
					{PartitionKey: "p 2", EntitiesPerSec: 100}, {PartitionKey: "p0003", EntitiesPerSec: 50}},
				DistinctKeys: 50, Lifecycle: "active"},
			4: {WritesPerSec: 2000, EntitiesPerSec: 2000, ThrottledPerSec: 150, EntityCount: 900, Bytes: 900 * 1024,
				HotKeys: []*pb.KeyLoad{{PartitionKey: "p0077", EntitiesPerSec: 2000}}, DistinctKeys: 1},
		},
	}
}

func sampleEvents() []*pb.Event {
	at := func(s int) int64 { return testNow.Add(time.Duration(s) * time.Second).UnixNano() }
	return []*pb.Event{
		{Seq: 1, UnixNano: at(0), Kind: pb.EventKind_EVENT_KIND_TABLE_CREATED, Table: "orders", RangeIds: []uint64{1},
			Servers: []string{"ps1", "ps2", "ps3"}, Message: "created table orders", Cause: "operator"},
		{Seq: 2, UnixNano: at(5), Kind: pb.EventKind_EVENT_KIND_SPLIT, Table: "orders", RangeIds: []uint64{1, 4},
			Figures: map[string]float64{"entities_per_sec": 3812.5, "threshold": 1000, "left_share": 0.4975, "split_seconds": 0.00411},
			Message: "split range 1 at p0050", Cause: "policy", DurationSeconds: 0.0421},
		{Seq: 3, UnixNano: at(6), Kind: pb.EventKind_EVENT_KIND_LEADER_TRANSFER, Table: "orders", RangeIds: []uint64{4},
			Servers: []string{"ps1", "ps2"}, Message: "moved leadership of range 4 from ps1 to ps2", Cause: "policy", DurationSeconds: 0.2},
	}
}

func runCtl(t *testing.T, ctx context.Context, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(ctx, args, &out, &errb, testEnv)
	return out.String(), errb.String(), err
}

func TestHumanOutput(t *testing.T) {
	f := &fakeMaster{pm: sampleMap(), events: sampleEvents()}
	addr := startFake(t, f)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"ranges", []string{"ranges"}, `RANGE  GROUP  SPANS  TABLE   START  END    GEN  REPLICAS      LEADER  STATE   READS/S  WRITES/S  ENTITIES/S  THROTTLED/S  ENTITIES       SIZE  HOT KEYS (entities/s)
2      2          1  logs    -inf   +inf     1  ps1,ps2,ps3   ps1     -             -         -           -            -         -          -  -
1      1          1  orders  -inf   p0050    2  ps1,ps2,ps3   ps1     active     12.5    1800.0      1812.5          0.0     52000   60.0 MiB  p0007=900 p0001=400 "p 2"=100 +1 more
4      4          1  orders  p0050  +inf     1  ps2,ps3,ps10  ps2     -           0.0    2000.0      2000.0        150.0       900  900.0 KiB  p0077=2000
`},
		{"ranges of one table, any case", []string{"ranges", "--table", "LOGS"}, `RANGE  GROUP  SPANS  TABLE  START  END   GEN  REPLICAS     LEADER  STATE  READS/S  WRITES/S  ENTITIES/S  THROTTLED/S  ENTITIES  SIZE  HOT KEYS (entities/s)
2      2          1  logs   -inf   +inf    1  ps1,ps2,ps3  ps1     -            -         -           -            -         -     -  -
`},
		{"servers", []string{"servers"}, `SERVER  GRPC ADDR       RAFT ADDR       ZONE        ALIVE                  LAST HEARTBEAT  REPLICAS  LEADERS  LED ENTITIES/S  DISK FREE
ps1     127.0.0.1:7201  127.0.0.1:7301  eu-west-1a  yes                          1.2s ago         2        2          1812.5  50.0 GiB of 100.0 GiB
ps2     127.0.0.1:7202  127.0.0.1:7302  eu-west-1b  yes, clock off by 45s       300ms ago         3        1          2000.0  100.0 MiB of 100.0 GiB, FULL
ps3     127.0.0.1:7203  127.0.0.1:7303  -           no                             9s ago         3        0             0.0  3.0 GiB of 100.0 GiB, low
ps10    127.0.0.1:7210  127.0.0.1:7310  -           no                              never         1        0             0.0  -
`},
		{"events", []string{"events"}, `   SEQ  TIME                         KIND             TABLE         RANGES      SERVERS       DURATION  CAUSE     FIGURES  MESSAGE
     1  2026-03-04 05:06:07.000 UTC  table-created    orders        1           ps1,ps2,ps3          -  operator  -  created table orders
     2  2026-03-04 05:06:12.000 UTC  split            orders        1,4         -               0.042s  policy    entities_per_sec=3812 left_share=0.497 split_seconds=0.00411 threshold=1000  split range 1 at p0050
     3  2026-03-04 05:06:13.000 UTC  leader-transfer  orders        4           ps1,ps2         0.200s  policy    -  moved leadership of range 4 from ps1 to ps2
`},
		{"events since", []string{"events", "--since", "3"}, `   SEQ  TIME                         KIND             TABLE         RANGES      SERVERS       DURATION  CAUSE     FIGURES  MESSAGE
     3  2026-03-04 05:06:13.000 UTC  leader-transfer  orders        4           ps1,ps2         0.200s  policy    -  moved leadership of range 4 from ps1 to ps2
`},
		{"split", []string{"split", "orders", "p0050"}, `split table orders at p0050: range 1 keeps the keys below, range 5 serves from it
RANGE  GROUP  TABLE   START  END    GEN  REPLICAS
1      1      orders  -inf   p0050    2  ps1,ps2,ps3
5      5      orders  p0050  +inf     1  ps1,ps2,ps3
`},
		{"split in group", []string{"split", "orders", "p0050", "--in-group"}, `split table orders at p0050: range 1 keeps the keys below, range 5 serves from it
RANGE  GROUP  TABLE   START  END    GEN  REPLICAS
1      1      orders  -inf   p0050    2  ps1,ps2,ps3
5      1      orders  p0050  +inf     1  ps1,ps2,ps3
`},
		{"merge", []string{"merge", "1"}, `merged range 1 with its right neighbour
RANGE  GROUP  TABLE   START  END   GEN  REPLICAS
1      1      orders  -inf   +inf    3  ps1,ps2,ps3
`},
		{"move", []string{"move", "4", "--to", "ps4", "--from", "ps3"}, `moved a replica of range 4 from ps3 to ps4
RANGE  GROUP  TABLE   START  END   GEN  REPLICAS
4      4      orders  m      +inf    4  ps1,ps2,ps4
`},
		{"transfer-leader", []string{"transfer-leader", "4", "--to", "ps3"}, "leadership of range 4 transferred to ps3\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCtl(t, context.Background(), append([]string{"--master", addr}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
		})
	}
}

// jsonObjects decodes each output line into a map, checking it is one object.
func jsonObjects(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", line, err)
		}
		objs = append(objs, m)
	}
	return objs
}

func keysOf(m map[string]any) string {
	return strings.Join(slices.Sorted(maps.Keys(m)), ",")
}

func TestJSONOutput(t *testing.T) {
	f := &fakeMaster{pm: sampleMap(), events: sampleEvents()}
	addr := startFake(t, f)
	const rangeKeys = "anchor,bytes,distinct_keys,end,entities_per_sec,entity_count,generation,group,group_spans,hot_keys,leader,load_reported,range_id,reads_per_sec,replicas,start,state,table,table_id,throttled_per_sec,writes_per_sec"
	tests := []struct {
		name  string
		args  []string
		lines int
		keys  string
		check func(t *testing.T, objs []map[string]any)
	}{
		{"ranges", []string{"ranges"}, 3, rangeKeys, func(t *testing.T, objs []map[string]any) {
			r := objs[1]
			if r["range_id"] != 1.0 || r["table"] != "orders" || r["start"] != "" || r["end"] != "p0050" || r["leader"] != "ps1" ||
				r["load_reported"] != true || r["entities_per_sec"] != 1812.5 || r["entity_count"] != 52000.0 || r["bytes"] != float64(60<<20) {
				t.Errorf("range 1: %v", r)
			}
			hot := r["hot_keys"].([]any)
			if len(hot) != 4 || hot[0].(map[string]any)["partition_key"] != "p0007" {
				t.Errorf("hot keys not all present, busiest first: %v", hot)
			}
			if objs[0]["load_reported"] != false || len(objs[0]["hot_keys"].([]any)) != 0 {
				t.Errorf("range without load: %v", objs[0])
			}
			// The Raft group: the range's own id whether its descriptor
			// names none (range 1) or names it (range 4).
			if r["group"] != 1.0 || objs[2]["range_id"] != 4.0 || objs[2]["group"] != 4.0 {
				t.Errorf("groups: range 1 in %v, range %v in %v; want each in its own", r["group"], objs[2]["range_id"], objs[2]["group"])
			}
		}},
		{"servers", []string{"servers"}, 4, "alive,clock_offset_seconds,clock_skewed,disk,disk_available_bytes,disk_capacity_bytes,disk_reserve_bytes,draining,grpc_addr,last_heartbeat,last_heartbeat_unix_nano,leader_entities_per_sec,leaders,metrics_addr,pprof_addr,raft_addr,replicas,server_id,zone", func(t *testing.T, objs []map[string]any) {
			s := objs[0]
			if s["server_id"] != "ps1" || s["alive"] != true || s["clock_skewed"] != false || s["replicas"] != 2.0 || s["leaders"] != 2.0 ||
				s["last_heartbeat"] != "2026-03-04T05:06:05.8Z" || s["disk"] != "ok" || s["disk_available_bytes"] != float64(50<<30) || s["zone"] != "eu-west-1a" {
				t.Errorf("ps1: %v", s)
			}
			if s := objs[1]; s["disk"] != "full" || s["disk_reserve_bytes"] != float64(256<<20) || s["disk_capacity_bytes"] != float64(100<<30) ||
				s["clock_skewed"] != true || s["clock_offset_seconds"] != 45.0 {
				t.Errorf("ps2: %v", s)
			}
			if objs[3]["server_id"] != "ps10" || objs[3]["last_heartbeat"] != "" || objs[3]["disk"] != "" || objs[3]["disk_available_bytes"] != 0.0 || objs[3]["zone"] != "" {
				t.Errorf("ps10: %v", objs[3])
			}
		}},
		{"events", []string{"events"}, 3, "cause,duration_seconds,figures,kind,message,range_ids,seq,servers,table,time,unix_nano", func(t *testing.T, objs []map[string]any) {
			e := objs[1]
			if e["kind"] != "split" || e["seq"] != 2.0 || e["time"] != "2026-03-04T05:06:12Z" || e["cause"] != "policy" ||
				e["figures"].(map[string]any)["entities_per_sec"] != 3812.5 || len(e["servers"].([]any)) != 0 {
				t.Errorf("split event: %v", e)
			}
		}},
		{"split", []string{"split", "orders", "p0050"}, 1, "op,partition_key,ranges,table", func(t *testing.T, objs []map[string]any) {
			rs := objs[0]["ranges"].([]any)
			if len(rs) != 2 || rs[1].(map[string]any)["start"] != "p0050" || keysOf(rs[0].(map[string]any)) != rangeKeys {
				t.Errorf("split ranges: %v", rs)
			}
		}},
		{"split in group", []string{"split", "orders", "p0050", "--in-group"}, 1, "op,partition_key,ranges,table", func(t *testing.T, objs []map[string]any) {
			rs := objs[0]["ranges"].([]any)
			if len(rs) != 2 || rs[0].(map[string]any)["group"] != 1.0 || rs[1].(map[string]any)["range_id"] != 5.0 || rs[1].(map[string]any)["group"] != 1.0 {
				t.Errorf("split ranges: %v, want ranges 1 and 5 in group 1", rs)
			}
		}},
		{"merge", []string{"merge", "1"}, 1, "op,range_id,ranges", nil},
		{"move", []string{"move", "4", "--to", "ps4"}, 1, "op,range_id,ranges,to", nil},
		{"transfer-leader", []string{"transfer-leader", "4", "--to", "ps3"}, 1, "op,range_id,ranges,to", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// --json after the command name works as well as before it.
			out, _, err := runCtl(t, context.Background(), append(append([]string{"--master", addr}, tc.args...), "--json")...)
			if err != nil {
				t.Fatal(err)
			}
			objs := jsonObjects(t, out)
			if len(objs) != tc.lines {
				t.Fatalf("%d JSON lines, want %d:\n%s", len(objs), tc.lines, out)
			}
			for _, o := range objs {
				if got := keysOf(o); got != tc.keys {
					t.Errorf("fields %s, want %s", got, tc.keys)
				}
			}
			if tc.check != nil {
				tc.check(t, jsonObjects(t, out))
			}
		})
	}
}

func TestRequestsReachMaster(t *testing.T) {
	f := &fakeMaster{pm: sampleMap()}
	addr := startFake(t, f)
	tests := []struct {
		args []string
		want any
	}{
		{[]string{"split", "orders", "p 5"}, &pb.SplitRequest{Table: "orders", PartitionKey: "p 5"}},
		{[]string{"split", "orders", "--", "-dash"}, &pb.SplitRequest{Table: "orders", PartitionKey: "-dash"}},
		{[]string{"merge", "7"}, &pb.MergeRequest{RangeId: 7}},
		{[]string{"move", "--to", "ps4", "7"}, &pb.MoveRequest{RangeId: 7, ToServerId: "ps4"}},
		{[]string{"move", "7", "--to", "ps4", "--from", "ps1"}, &pb.MoveRequest{RangeId: 7, ToServerId: "ps4", FromServerId: "ps1"}},
		{[]string{"transfer-leader", "7", "--to", "ps2"}, &pb.MasterTransferLeaderRequest{RangeId: 7, ToServerId: "ps2"}},
		{[]string{"move", "7", "--to", "ps4", "--whole"}, &pb.MoveRequest{RangeId: 7, ToServerId: "ps4", Whole: true}},
		{[]string{"transfer-leader", "7", "--to", "ps2", "--whole"}, &pb.MasterTransferLeaderRequest{RangeId: 7, ToServerId: "ps2", Whole: true}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if _, _, err := runCtl(t, context.Background(), append([]string{"--master", addr}, tc.args...)...); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(f.lastRequest())
			want, _ := json.Marshal(tc.want)
			if string(got) != string(want) {
				t.Errorf("request %s, want %s", got, want)
			}
		})
	}
}

func TestArgumentErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want error // nil: no error (help)
	}{
		{"no command", nil, ErrUsage},
		{"unknown command", []string{"bogus"}, ErrUnknownCommand},
		{"unknown flag", []string{"ranges", "--bogus"}, ErrUsage},
		{"unknown global flag", []string{"--bogus", "ranges"}, ErrUsage},
		{"split without key", []string{"split", "orders"}, ErrUsage},
		{"split empty key", []string{"split", "orders", ""}, ErrUsage},
		{"ranges with argument", []string{"ranges", "orders"}, ErrUsage},
		{"merge non-numeric", []string{"merge", "x"}, ErrUsage},
		{"merge zero", []string{"merge", "0"}, ErrUsage},
		{"move without to", []string{"move", "3"}, ErrUsage},
		{"transfer-leader without to", []string{"transfer-leader", "3"}, ErrUsage},
		{"since not a number", []string{"events", "--since", "x"}, ErrUsage},
		{"zero timeout", []string{"--timeout", "0", "servers"}, ErrUsage},
		{"empty master", []string{"--master", " , ", "servers"}, ErrUsage},
		{"help flag", []string{"-h"}, nil},
		{"command help flag", []string{"split", "-h"}, nil},
		{"help command", []string{"help", "move"}, nil},
		{"help", []string{"help"}, nil},
		{"help of an unknown command", []string{"help", "bogus"}, ErrUnknownCommand},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// An address nothing listens on: argument errors must come
			// before any call.
			args := append([]string{"--master", "127.0.0.1:1", "--timeout", "1s"}, tc.args...)
			_, stderr, err := runCtl(t, context.Background(), args...)
			if tc.want == nil {
				if err != nil || !strings.Contains(stderr, "usage: tablestore ctl") {
					t.Fatalf("err %v, stderr %q", err, stderr)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

func TestMasterErrors(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		args     []string
		code     codes.Code
		reason   string
		contains []string
	}{
		{"table not found", rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, "master: table not found", nil),
			[]string{"split", "nope", "k"}, codes.NotFound, rpcerr.ReasonTableNotFound,
			[]string{"ctl: split: master: table not found", "code NotFound", "reason TABLE_NOT_FOUND"}},
		{"busy", rpcerr.New(codes.Aborted, rpcerr.ReasonUnavailable, "master: range busy with another operation", map[string]string{"retry_after_ms": "500"}),
			[]string{"merge", "3"}, codes.Aborted, rpcerr.ReasonUnavailable,
			[]string{"range busy", "code Aborted", "reason UNAVAILABLE", "retry_after_ms=500"}},
		{"bad target", rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, "master: ps9 is not a live server", nil),
			[]string{"move", "3", "--to", "ps9"}, codes.InvalidArgument, rpcerr.ReasonInvalidInput, []string{"ps9 is not a live server"}},
		{"unimplemented", status.Error(codes.Unimplemented, "method TransferLeader not implemented"),
			[]string{"transfer-leader", "3", "--to", "ps2"}, codes.Unimplemented, "",
			[]string{"the master does not implement transfer-leader"}},
		{"events refused", rpcerr.New(codes.Internal, "", "boom", nil), []string{"events"}, codes.Internal, "", []string{"ctl: events: boom"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := startFake(t, &fakeMaster{pm: sampleMap(), err: tc.err})
			_, _, err := runCtl(t, context.Background(), append([]string{"--master", addr}, tc.args...)...)
			var me *MasterError
			if !errors.As(err, &me) {
				t.Fatalf("err %v (%T), want *MasterError", err, err)
			}
			if me.Info.Code != tc.code || me.Info.Reason != tc.reason {
				t.Errorf("code %v reason %q, want %v %q", me.Info.Code, me.Info.Reason, tc.code, tc.reason)
			}
			if status.Code(err) != tc.code {
				t.Errorf("status.Code(err) = %v: the status is not reachable through Unwrap", status.Code(err))
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
	t.Run("unknown table", func(t *testing.T) {
		addr := startFake(t, &fakeMaster{pm: sampleMap()})
		if _, _, err := runCtl(t, context.Background(), "--master", addr, "ranges", "--table", "nope"); !errors.Is(err, ErrTableNotFound) {
			t.Fatalf("err %v", err)
		}
	})
	// Every command says the same when no master answers: which addresses
	// were tried, for how long. `events` (without --follow) said
	// "context deadline exceeded [code DeadlineExceeded]", as if a master
	// had answered DeadlineExceeded.
	for _, args := range [][]string{{"split", "t", "k"}, {"servers"}, {"events"}, {"events", "--follow"}, {"master", "list"}, {"drain", "ps1"}} {
		t.Run("no master reachable: "+strings.Join(args, " "), func(t *testing.T) {
			start := time.Now()
			_, _, err := runCtl(t, context.Background(), append([]string{"--master", "127.0.0.1:1", "--timeout", "300ms"}, args...)...)
			if !errors.Is(err, masterclient.ErrNoMaster) || !strings.Contains(err.Error(), "no master leader answered at 127.0.0.1:1 within 300ms") {
				t.Fatalf("err %v", err)
			}
			var me *MasterError
			if errors.As(err, &me) {
				t.Errorf("err %v is a *MasterError: no master answered", err)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("took %v, --timeout was 300ms", time.Since(start))
			}
		})
	}
}

// TestOnlyFollowersGiven: a --master that names only a follower fails
// after --timeout saying so (it said only "no master leader answered"),
// for reads, operations and streams alike.
func TestOnlyFollowersGiven(t *testing.T) {
	follower := startFake(t, &fakeMaster{notLead: true})
	for _, args := range [][]string{{"servers"}, {"merge", "1"}, {"events"}} {
		t.Run(args[0], func(t *testing.T) {
			_, _, err := runCtl(t, context.Background(), append([]string{"--master", follower, "--timeout", "300ms"}, args...)...)
			if !errors.Is(err, masterclient.ErrNoMaster) || !strings.Contains(err.Error(), "does --master list every master?") {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// A follower answers NOT_LEADER; ctl moves on to the next address for reads,
// operations and streams alike.
func TestFollowsLeader(t *testing.T) {
	follower := startFake(t, &fakeMaster{notLead: true})
	leader := &fakeMaster{pm: sampleMap(), events: sampleEvents()}
	leaderAddr := startFake(t, leader)
	for _, args := range [][]string{{"servers"}, {"merge", "1"}, {"events"}} {
		t.Run(args[0], func(t *testing.T) {
			out, _, err := runCtl(t, context.Background(), append([]string{"--master", follower + "," + leaderAddr, "--json"}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if len(jsonObjects(t, out)) == 0 {
				t.Fatal("no output")
			}
		})
	}
}

// syncBuffer lets the test read output a running command is writing.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestEventsFollowResumes(t *testing.T) {
	tests := []struct {
		name string
		// idle is how long the first stream stays open, quiet, before the
		// master breaks it; longer than --timeout must not end the follow.
		idle time.Duration
	}{
		{"break at once", 0},
		{"break after an idle stretch longer than --timeout", 1500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			evs := sampleEvents()
			f := &fakeMaster{events: evs[:2], later: evs[2:], followBreak: true, breakAfter: tc.idle}
			addr := startFake(t, f)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"--master", addr, "--json", "--timeout", "500ms", "events", "--follow"}, &out, &bytes.Buffer{}, testEnv)
			}()
			deadline := time.Now().Add(10 * time.Second)
			for strings.Count(out.String(), "\n") < 3 {
				select {
				case err := <-done:
					t.Fatalf("follow ended early with %v; output:\n%s", err, out.String())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("followed output so far:\n%s", out.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Interrupting a follow is the normal way to end it.
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("follow ended with %v", err)
			}
			var seqs []float64
			for _, o := range jsonObjects(t, out.String()) {
				seqs = append(seqs, o["seq"].(float64))
			}
			if len(seqs) != 3 || seqs[0] != 1 || seqs[1] != 2 || seqs[2] != 3 {
				t.Errorf("seqs %v, want 1 2 3 each once", seqs)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.sinceSeen) < 2 || f.sinceSeen[0] != 0 || f.sinceSeen[1] != 3 {
				t.Errorf("since_seq of the streams %v, want 0 then 3 (resume after the last seen)", f.sinceSeen)
			}
		})
	}
	t.Run("gives up when no master serves for --timeout", func(t *testing.T) {
		start := time.Now()
		_, _, err := runCtl(t, context.Background(), "--master", "127.0.0.1:1", "--timeout", "300ms", "events", "--follow")
		if !errors.Is(err, masterclient.ErrNoMaster) {
			t.Fatalf("err %v", err)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("gave up after %v", el)
		}
	})
}

// TestDrainBlockers: a drain that waits in vain names the ranges no live,
// non-draining server could take and the servers that are down.
func TestDrainBlockers(t *testing.T) {
	rng := func(id uint64, servers ...string) *pb.RangeDescriptor {
		d := &pb.RangeDescriptor{RangeId: id}
		for _, s := range servers {
			d.Replicas = append(d.Replicas, &pb.Replica{ServerId: s})
		}
		return d
	}
	sv := func(id string, alive, draining bool) *pb.ServerInfo {
		return &pb.ServerInfo{ServerId: id, Alive: alive, Draining: draining}
	}
	for _, tc := range []struct {
		name string
		pm   *pb.PartitionMap
		want []string
	}{
		{"room for every range", &pb.PartitionMap{
			Servers: []*pb.ServerInfo{sv("a", true, true), sv("b", true, false), sv("c", true, false), sv("d", true, false)},
			Ranges:  []*pb.RangeDescriptor{rng(1, "a", "b", "c"), rng(2, "b", "c", "d")},
		}, nil},
		{"the only other server is down", &pb.PartitionMap{
			Servers: []*pb.ServerInfo{sv("a", true, true), sv("b", true, false), sv("c", true, false), sv("d", false, false)},
			Ranges:  []*pb.RangeDescriptor{rng(1, "a", "b", "c"), rng(2, "b", "c", "d")},
		}, []string{"no live server that is not draining can take range 1 (each such server already holds a replica of it)", "servers down: d"}},
		{"another server draining", &pb.PartitionMap{
			Servers: []*pb.ServerInfo{sv("a", true, true), sv("b", true, false), sv("c", true, false), sv("d", true, true)},
			Ranges:  []*pb.RangeDescriptor{rng(1, "a", "b", "c"), rng(2, "a", "b", "d"), rng(3, "a", "c", "d")},
		}, []string{"no live server that is not draining can take range 1 (each such server already holds a replica of it)"}},
		{"many blocked", &pb.PartitionMap{
			Servers: []*pb.ServerInfo{sv("a", true, true), sv("b", true, false), sv("c", true, false)},
			Ranges: []*pb.RangeDescriptor{rng(1, "a", "b", "c"), rng(2, "a", "b", "c"), rng(3, "a", "b", "c"),
				rng(4, "a", "b", "c"), rng(5, "a", "b", "c"), rng(6, "a", "b", "c"), rng(7, "a", "b", "c")},
		}, []string{"no live server that is not draining can take range 1, 2, 3, 4, 5 and 2 more (each such server already holds a replica of it)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := drainBlockers(tc.pm, "a"); !slices.Equal(got, tc.want) {
				t.Fatalf("drainBlockers =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestJSONErrors: with --json a failure is one JSON object on stderr's last
// line (the text error is not printed again by the caller), stdout holds
// no partial record, and the error still fails the command.
func TestJSONErrors(t *testing.T) {
	master := startFake(t, &fakeMaster{pm: sampleMap(), err: rpcerr.New(codes.Aborted, rpcerr.ReasonUnavailable, "master: range busy", map[string]string{"retry_after_ms": "500"})})
	tests := []struct {
		name                 string
		args                 []string
		kind, code, reason   string
		metadata, errContain string
	}{
		{"master refused", []string{"--master", master, "merge", "3", "--json"}, "master", "Aborted", "UNAVAILABLE", "500", "range busy"},
		{"usage", []string{"--json", "merge", "x"}, "usage", "", "", "", "RANGE_ID must be a positive number"},
		{"unknown flag after --json", []string{"--json", "ranges", "--bogus"}, "usage", "", "", "", "flag provided but not defined"},
		{"no master", []string{"--master", "127.0.0.1:1", "--timeout", "300ms", "--json", "servers"}, "no_master", "", "", "", "no master leader answered"},
		{"table not found", []string{"--master", master, "--json", "ranges", "--table", "nope"}, "table_not_found", "", "", "", "nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, err := runCtl(t, context.Background(), tc.args...)
			var rep *ReportedError
			if err == nil || !errors.As(err, &rep) {
				t.Fatalf("err %v (%T), want a *ReportedError", err, err)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			var rec map[string]any
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
				t.Fatalf("stderr's last line is not JSON: %v\n%s", err, stderr)
			}
			if keysOf(rec) != "code,error,kind,metadata,reason" {
				t.Errorf("fields %s", keysOf(rec))
			}
			md, _ := rec["metadata"].(map[string]any)
			if rec["kind"] != tc.kind || rec["code"] != tc.code || rec["reason"] != tc.reason || md == nil ||
				(tc.metadata != "" && md["retry_after_ms"] != tc.metadata) || !strings.Contains(rec["error"].(string), tc.errContain) {
				t.Errorf("error record %v", rec)
			}
		})
	}
	t.Run("without --json no record", func(t *testing.T) {
		_, stderr, err := runCtl(t, context.Background(), "--master", master, "merge", "3")
		var rep *ReportedError
		if err == nil || errors.As(err, &rep) || strings.Contains(stderr, "{") {
			t.Errorf("err %v, stderr %q", err, stderr)
		}
	})
}
