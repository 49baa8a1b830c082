package master

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// BenchmarkMapPerCreate measures what a watcher is sent for one CreateTable
// with n tables in the map: the whole map (a watch without deltas, and
// every refresh) against the delta. Run with -bench MapPerCreate.
func BenchmarkMapPerCreate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1}
		s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
		reps := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
		var index uint64
		create := func(name string) {
			data, _ := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: name, Replicas: reps, RequestId: []byte(name)})
			index++
			res := s.fsm.Apply(&raft.Log{Index: index, Data: data}).(*applyResult)
			s.reports.setLeader(res.ranges[0].GetRangeId(), "ps1")
			s.bump()
		}
		for i := 0; i < n; i++ {
			create(fmt.Sprintf("table%06d", i))
		}
		b.Run(fmt.Sprintf("whole/tables=%d", n), func(b *testing.B) {
			size := 0
			for i := 0; i < b.N; i++ {
				m, _ := s.partitionMap()
				buf, _ := proto.Marshal(m)
				size = len(buf)
			}
			b.ReportMetric(float64(size), "bytes/op")
		})
		b.Run(fmt.Sprintf("delta/tables=%d", n), func(b *testing.B) {
			w := s.addWatcher()
			defer s.removeWatcher(w)
			size := 0
			for i := 0; i < b.N; i++ {
				create(fmt.Sprintf("extra%d-%09d", n, i))
				cs, leaders, _, _, v := s.take(w)
				buf, _ := proto.Marshal(s.partitionDelta(cs, leaders, v))
				size = len(buf)
			}
			b.ReportMetric(float64(size), "bytes/op")
		})
	}
}

// BenchmarkStateBytesPerTable reports the master's heap per table (the
// table, its range, its request record and the indexes) at 10,000 tables.
func BenchmarkStateBytesPerTable(b *testing.B) {
	const n = 10000
	reps := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f := &fsm{st: newState()}
		for j := 0; j < n; j++ {
			name := fmt.Sprintf("table%06d", j)
			data, _ := encodeCommand(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, &pb.CreateTableCommand{Name: name, Replicas: reps, RequestId: []byte(name + "-request-id-0123")})
			f.Apply(&raft.Log{Index: uint64(j + 1), Data: data})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/table")
		runtime.KeepAlive(f)
	}
}
