package master

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	pb "tablestore/proto/tablestorepb"
)

// snapshotFSM is a master state of n tables of four ranges each, full
// request records and a full event log.
func snapshotFSM(n int) *fsm {
	reps := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
	f := &fsm{st: newState()}
	index := uint64(0)
	for j := 0; j < n; j++ {
		name := fmt.Sprintf("table%06d", j)
		data, _ := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: name, Replicas: reps, RequestId: []byte(name + "-request-id-0123")})
		index++
		f.Apply(&raft.Log{Index: index, Data: data})
	}
	for id := uint64(1); id <= uint64(n); id++ {
		var ds []*pb.RangeDescriptor
		f.read(func(st *state) {
			d := st.ranges[id]
			for k := 0; k < 4; k++ {
				nd := &pb.RangeDescriptor{RangeId: id, Table: d.GetTable(), TableId: d.GetTableId(), Generation: 2, Replicas: reps}
				if k > 0 {
					nd.RangeId = uint64(n) + id*4 + uint64(k)
					nd.Start = fmt.Sprintf("key%02d", k)
				}
				if k < 3 {
					nd.End = fmt.Sprintf("key%02d", k+1)
				}
				ds = append(ds, nd)
			}
		})
		data, _ := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: ds})
		index++
		f.Apply(&raft.Log{Index: index, Data: data})
	}
	for j := 0; j < maxRequests; j++ {
		name := fmt.Sprintf("gone%06d", j)
		data, _ := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, &pb.DeleteTableCommand{Name: name, RequestId: []byte(name + "-request-id-0123")})
		index++
		f.Apply(&raft.Log{Index: index, Data: data})
	}
	for j := 0; j < maxEvents; j++ {
		data, _ := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_APPEND_EVENT, &pb.AppendEventCommand{Event: &pb.Event{
			Kind: pb.EventKind_EVENT_KIND_SPLIT, Table: "table000001", RangeIds: []uint64{1, 2}, Servers: []string{"ps1", "ps2"},
			Figures: map[string]float64{"entities_per_sec": 1234}, Message: "range 1 of table000001 split at key01: hot"}})
		index++
		f.Apply(&raft.Log{Index: index, Data: data})
	}
	return f
}

type memSnapSink struct{ bytes.Buffer }

func (*memSnapSink) ID() string    { return "bench" }
func (*memSnapSink) Cancel() error { return nil }
func (*memSnapSink) Close() error  { return nil }

// BenchmarkMasterSnapshot: the master's Raft snapshot at 1,000 tables (4,000
// ranges, full request records and event log): Snapshot holds the state's
// read lock (Apply waits) for its whole time; bytes/op is the snapshot's
// size.
func BenchmarkMasterSnapshot(b *testing.B) {
	f := snapshotFSM(1000)
	var size int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		var sink memSnapSink
		if err := s.Persist(&sink); err != nil {
			b.Fatal(err)
		}
		size = sink.Len()
	}
	b.ReportMetric(float64(size), "bytes/op")
}

// BenchmarkMasterRestore: installing that snapshot.
func BenchmarkMasterRestore(b *testing.B) {
	f := snapshotFSM(1000)
	s, _ := f.Snapshot()
	var sink memSnapSink
	_ = s.Persist(&sink)
	data := sink.Bytes()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := (&fsm{st: newState()}).Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			b.Fatal(err)
		}
	}
}
