package router

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// randomMap is a whole map of some of 30 tables (random case, ids bumped
// when re-created), each cut into 1-3 ranges, with leaders for some.
func randomMap(rng *rand.Rand, version uint64, ids map[string]uint64) *pb.PartitionMap {
	m := &pb.PartitionMap{Version: version, Epoch: 1, Leaders: map[uint64]string{},
		Servers: []*pb.ServerInfo{{ServerId: "a"}, {ServerId: "b"}}}
	for i := 0; i < 30; i++ {
		if rng.IntN(3) == 0 {
			delete(ids, fmt.Sprint(i))
			continue
		}
		if _, ok := ids[fmt.Sprint(i)]; !ok || rng.IntN(10) == 0 {
			ids[fmt.Sprint(i)] = uint64(version*100) + uint64(i) // (re)created
		}
		tid := ids[fmt.Sprint(i)]
		name := fmt.Sprintf("tab%02d", i)
		if tid%2 == 0 {
			name = strings.ToUpper(name)
		}
		m.Tables = append(m.Tables, &pb.Table{Name: name, TableId: tid})
		bounds := []string{"", "m", "t", ""}[:2+rng.IntN(3)]
		bounds[len(bounds)-1] = ""
		for j := 0; j+1 < len(bounds); j++ {
			rid := tid*10 + uint64(j) + uint64(len(bounds))*1000
			m.Ranges = append(m.Ranges, &pb.RangeDescriptor{RangeId: rid, TableId: tid, Start: bounds[j], End: bounds[j+1], Generation: uint64(len(bounds))})
			if rng.IntN(2) == 0 {
				m.Leaders[rid] = []string{"a", "b"}[rng.IntN(2)]
			}
		}
	}
	return m
}

// diff is the delta from a to b, as the master would send it.
func diff(a, b *pb.PartitionMap) *pb.PartitionMap {
	d := &pb.PartitionMap{Delta: true, Version: b.GetVersion(), Epoch: b.GetEpoch(), Servers: b.GetServers(), Leaders: map[uint64]string{}}
	at := map[string]bool{}
	for _, t := range a.GetTables() {
		at[strings.ToLower(t.GetName())] = true
	}
	bt := map[string]bool{}
	for _, t := range b.GetTables() {
		bt[strings.ToLower(t.GetName())] = true
		d.Tables = append(d.Tables, t)
	}
	for k := range at {
		if !bt[k] {
			d.RemovedTables = append(d.RemovedTables, k)
		}
	}
	br := map[uint64]bool{}
	for _, r := range b.GetRanges() {
		br[r.GetRangeId()] = true
		d.Ranges = append(d.Ranges, r)
	}
	for _, r := range a.GetRanges() {
		if !br[r.GetRangeId()] {
			d.RemovedRanges = append(d.RemovedRanges, r.GetRangeId())
		}
	}
	for id := range a.GetLeaders() {
		if _, ok := b.GetLeaders()[id]; !ok {
			d.RemovedLeaders = append(d.RemovedLeaders, id)
		}
	}
	for id, l := range b.GetLeaders() {
		d.Leaders[id] = l
	}
	return d
}

// state is the router's map as text, for comparison.
func (r *Router) state() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var b strings.Builder
	var names []string
	for _, t := range r.sorted {
		names = append(names, t.GetName())
	}
	fmt.Fprintln(&b, "sorted", names)
	var keys []string
	for k, t := range r.tables {
		keys = append(keys, fmt.Sprintf("%s=%d", k, t.GetTableId()))
	}
	sort.Strings(keys)
	fmt.Fprintln(&b, "tables", keys)
	var tids []uint64
	for tid := range r.ranges {
		tids = append(tids, tid)
	}
	sort.Slice(tids, func(i, j int) bool { return tids[i] < tids[j] })
	for _, tid := range tids {
		fmt.Fprint(&b, tid, ":")
		for _, d := range r.ranges[tid] {
			fmt.Fprintf(&b, " %d[%s,%s)", d.GetRangeId(), d.GetStart(), d.GetEnd())
			if r.rangeTable[d.GetRangeId()] != tid {
				fmt.Fprint(&b, "!index")
			}
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintln(&b, "indexed", len(r.rangeTable))
	fmt.Fprintln(&b, "leaders", r.leaders)
	return b.String()
}

func newTestRouter() *Router {
	return &Router{tables: map[string]*pb.Table{}, ranges: map[uint64][]*pb.RangeDescriptor{}, rangeTable: map[uint64]uint64{},
		servers: map[string]*pb.ServerInfo{}, leaders: map[uint64]string{}, hinted: map[uint64]string{}}
}

// TestDeltasMatchWholeMaps applies the deltas between random maps and
// checks the router then holds what installing the whole map gives: the
// sorted list, the range index, leaders; and that a delta the held map
// already covers is skipped, and one of another master asks for a resync.
func TestDeltasMatchWholeMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ids := map[string]uint64{}
	prev := randomMap(rng, 1, ids)
	r := newTestRouter()
	r.installStream(prev)
	for v := uint64(2); v < 200; v++ {
		next := randomMap(rng, v, ids)
		if !r.applyStreamDelta(diff(prev, next)) {
			t.Fatalf("version %d: delta refused", v)
		}
		want := newTestRouter()
		want.install(next)
		if got, w := r.state(), want.state(); got != w {
			t.Fatalf("version %d: after the delta\n%s\nwhole map\n%s", v, got, w)
		}
		prev = next
	}
	before := r.state()
	stale := diff(prev, randomMap(rng, 5, map[string]uint64{}))
	if !r.applyStreamDelta(stale) || r.state() != before {
		t.Fatal("a delta older than the held map was applied")
	}
	other := diff(prev, prev)
	other.Epoch, other.Version = 2, 1000
	if r.applyStreamDelta(other) {
		t.Fatal("a delta of another master's numbering was applied")
	}
}
