package master

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/master/scheduler"

	pb "tablestore/proto/tablestorepb"
)

// TestReplicaGC: a stale replica is due for collection once staleGrace
// passed since it was first reported, whether or not it is reported again
// (heartbeats are deltas), then due again only after staleRetry, or at
// once when its collection did not start; it is forgotten when no longer
// reported.
func TestReplicaGC(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		op     string // observe, due, unask
		server string
		at     time.Duration
		want   []uint64
	}{
		{"observe", "ps2", 0, nil},                      // first report: remembered
		{"due", "ps2", staleGrace / 2, nil},             // within the grace
		{"observe", "ps3", staleGrace, nil},             // another server: its own grace
		{"due", "ps3", staleGrace, nil},                 //
		{"due", "ps2", staleGrace, []uint64{7}},         // grace over, no report since: collect
		{"due", "ps2", staleGrace + time.Second, nil},   // asked already
		{"unask", "ps2", staleGrace + time.Second, nil}, // the range was claimed by an operation
		{"due", "ps2", staleGrace + 2*time.Second, []uint64{7}},
		{"observe", "ps2", 10 * time.Second, nil}, // still reported
		{"due", "ps2", 10 * time.Second, nil},     // within staleRetry of the ask
		{"due", "ps2", staleGrace + 2*time.Second + staleRetry, []uint64{7}},
		{"due", "ps3", 2 * staleGrace, []uint64{7}}, // ps3's grace over
	}
	g := newReplicaGC()
	for i, s := range steps {
		var got []uint64
		switch s.op {
		case "observe":
			g.observe(s.server, 7, 2, at(s.at))
		case "unask":
			g.unask(s.server, 7)
		case "due":
			got = g.due(s.server, at(s.at))
		}
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Fatalf("step %d (%s %s at %v): due %v, want %v", i, s.op, s.server, s.at, got, s.want)
		}
	}
	g.forget(at(10*time.Second + 2*staleRetry + time.Second))
	g.observe("ps2", 7, 2, at(100*time.Second))
	if got := g.due("ps2", at(100*time.Second)); len(got) != 0 {
		t.Fatal("a replica forgotten and reported again was collected without a grace")
	}
}

// An expedited stale replica (it may hold up a range assigned to its
// server) is due at once, then, like any, only after staleRetry.
func TestReplicaGCExpedite(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := newReplicaGC()
	g.observe("ps2", 7, 2, t0)
	g.expedite("ps2", 7, t0.Add(time.Millisecond))
	g.expedite("ps3", 8, t0)
	if got := g.due("ps2", t0.Add(time.Millisecond)); fmt.Sprint(got) != "[7]" {
		t.Fatalf("due %v, want [7] within the grace", got)
	}
	if got := g.due("ps3", t0); fmt.Sprint(got) != "[8]" {
		t.Fatalf("due %v, want [8] (never observed, expedited)", got)
	}
	if got := g.due("ps2", t0.Add(staleRetry/2)); len(got) != 0 {
		t.Fatalf("due %v again within staleRetry", got)
	}
}

// A stale replica asked for is asked for again before staleRetry once it
// is reported at another generation: the server refused a span of a
// group it is still a member of, and that group has since applied the
// span's detach there (an anchor group's span, cut off across its
// detach, split and move: TestStaleAnchorDoesNotHoldUpDetachedRange). A
// report at the same generation (the full report) changes nothing.
func TestReplicaGCAsksAgainOnceChanged(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		op   string // observe (at gen), expedite, due
		gen  uint64
		at   time.Duration
		want []uint64
	}{
		{"expedite", 0, 0, nil},              // holds up an assigned range, no report of it seen yet
		{"due", 0, 0, []uint64{7}},           // asked: refused, a span of a live group there
		{"observe", 2, time.Second, nil},     // a full report: the span, as asked
		{"due", 0, time.Second, []uint64{7}}, // the generation was not known at the ask
		{"observe", 2, 2 * time.Second, nil}, // the same span again
		{"due", 0, 2 * time.Second, nil},     // within staleRetry, unchanged
		{"observe", 3, 3 * time.Second, nil}, // the detach applied there: a group of its own
		{"due", 0, 3 * time.Second, []uint64{7}},
		{"due", 0, 4 * time.Second, nil}, // asked at this generation
		{"observe", 3, 5 * time.Second, nil},
		{"due", 0, 5 * time.Second, nil},
		{"due", 0, 3*time.Second + staleRetry, []uint64{7}},
	}
	g := newReplicaGC()
	for i, s := range steps {
		var got []uint64
		switch s.op {
		case "observe":
			g.observe("ps2", 7, s.gen, at(s.at))
		case "expedite":
			g.expedite("ps2", 7, at(s.at))
		case "due":
			got = g.due("ps2", at(s.at))
		}
		if fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Fatalf("step %d (%s at %v): due %v, want %v", i, s.op, s.at, got, s.want)
		}
	}
}

// holdingUp returns a replica only on the map's positive proof that its
// range removed the server (a descriptor that does not list it), never for
// a range the map does not hold: the map drops an older range a newer
// adopted descriptor overlaps (applyUpdateRanges), so a split's right half
// adopted before its left half leaves a live parent, whose replica here
// may be a voter holding acknowledged entries, out of the map for a while.
func TestHoldingUp(t *testing.T) {
	rep := func(ids ...string) []*pb.Replica {
		var out []*pb.Replica
		for _, id := range ids {
			out = append(out, &pb.Replica{ServerId: id})
		}
		return out
	}
	// Range 1 ["", "p") split at "m": 1 keeps ["", "m"), 4 takes ["m", "p").
	parentMoved := &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "m", Generation: 7, Replicas: rep("ps1", "ps2", "ps3")}
	parentHere := &pb.RangeDescriptor{RangeId: 1, TableId: 7, End: "m", Generation: 6, Replicas: rep("ps1", "ps3", "ps4")}
	right := &pb.RangeDescriptor{RangeId: 4, TableId: 7, Start: "m", End: "p", Generation: 6, Replicas: rep("ps1", "ps3", "ps4")}
	rest := &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "p", Generation: 1, Replicas: rep("ps1", "ps3", "ps4")}
	other := &pb.RangeDescriptor{RangeId: 9, TableId: 8, Generation: 3, Replicas: rep("ps1", "ps3", "ps4")}
	tests := []struct {
		name   string
		ranges []*pb.RangeDescriptor
		hosted []uint64 // ps4's replicas
		want   []uint64
	}{
		// Chaos seed 299: ps4, cut off across the split, was moved off
		// the parent; its replica of 1 covers 4's start.
		{name: "removed from the parent, split-born range waiting", ranges: []*pb.RangeDescriptor{parentMoved, right, rest}, hosted: []uint64{1, 2}, want: []uint64{1}},
		// The review's finding: the map adopted 4 and dropped 1 (still
		// listing ps4) until 1's own new descriptor is adopted.
		{name: "parent dropped from the map", ranges: []*pb.RangeDescriptor{right, rest}, hosted: []uint64{1, 2}},
		{name: "parent lists the server", ranges: []*pb.RangeDescriptor{parentHere, right, rest}, hosted: []uint64{1, 2}},
		{name: "nothing waits: the right half is hosted", ranges: []*pb.RangeDescriptor{parentMoved, right, rest}, hosted: []uint64{1, 2, 4}},
		{name: "only a generation-1 range waits (bootstrapped, not split-born)", ranges: []*pb.RangeDescriptor{parentMoved, right, rest}, hosted: []uint64{1, 4}},
		{name: "a range of another table waits", ranges: []*pb.RangeDescriptor{parentMoved, other}, hosted: []uint64{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newState()
			for _, d := range tc.ranges {
				st.putRange(d)
			}
			hosted := map[uint64]bool{}
			for _, id := range tc.hosted {
				hosted[id] = true
			}
			if got := holdingUp("ps4", hosted, st); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("holdingUp = %v, want %v", got, tc.want)
			}
		})
	}
}

// A reported replica is retired only when newer ranges cover its whole
// span; one only overlapped (its range's id dropped from the map by the
// adoption of a split's right half) is neither retired nor adopted.
func TestReconcileRetired(t *testing.T) {
	rep := []*pb.Replica{{ServerId: "ps1"}, {ServerId: "ps2"}, {ServerId: "ps3"}}
	table := &pb.Table{Name: "t", TableId: 7}
	parent := &pb.RangeDescriptor{RangeId: 1, Table: "t", TableId: 7, End: "z", Generation: 4, Replicas: rep}
	right := &pb.RangeDescriptor{RangeId: 4, Table: "t", TableId: 7, Start: "m", End: "z", Generation: 5, Replicas: rep}
	left := &pb.RangeDescriptor{RangeId: 1, Table: "t", TableId: 7, End: "m", Generation: 5, Replicas: rep}
	// The left half merged into its left neighbour, range 3.
	merged := &pb.RangeDescriptor{RangeId: 3, Table: "t", TableId: 7, End: "m", Generation: 6, Replicas: rep}
	tail := &pb.RangeDescriptor{RangeId: 5, Table: "t", TableId: 7, Start: "z", Generation: 2, Replicas: rep}
	tests := []struct {
		name        string
		ranges      []*pb.RangeDescriptor
		wantRetired bool
		wantNewer   bool
	}{
		{name: "right half adopted, parent dropped", ranges: []*pb.RangeDescriptor{right, tail}},
		{name: "both halves recorded: the parent's id is newer", ranges: []*pb.RangeDescriptor{left, right, tail}},
		{name: "both halves covered by newer ranges of other ids", ranges: []*pb.RangeDescriptor{merged, right, tail}, wantRetired: true},
		{name: "not in the map, nothing overlaps", ranges: []*pb.RangeDescriptor{tail}, wantNewer: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fsm{st: newState()}
			f.st.putTable("t", table)
			for _, d := range tc.ranges {
				f.st.putRange(d)
			}
			newer, retired, _ := f.reconcile("ps2", []*pb.RangeStatus{{RangeId: 1, Generation: 4, Range: parent}})
			if (len(retired) > 0) != tc.wantRetired || (len(newer) > 0) != tc.wantNewer {
				t.Fatalf("retired %v, newer %v; want retired %v, newer %v", retired, newer, tc.wantRetired, tc.wantNewer)
			}
		})
	}
}

// coversSpan: the union of spans covers [start, end) ("" ends at infinity).
func TestCoversSpan(t *testing.T) {
	r := func(start, end string) *pb.RangeDescriptor { return &pb.RangeDescriptor{Start: start, End: end} }
	tests := []struct {
		d     *pb.RangeDescriptor
		spans []*pb.RangeDescriptor
		want  bool
	}{
		{r("", ""), nil, false},
		{r("", ""), []*pb.RangeDescriptor{r("", "")}, true},
		{r("", ""), []*pb.RangeDescriptor{r("m", "")}, false},
		{r("", ""), []*pb.RangeDescriptor{r("m", ""), r("", "m")}, true},
		{r("", ""), []*pb.RangeDescriptor{r("", "m"), r("n", "")}, false},
		{r("a", "z"), []*pb.RangeDescriptor{r("", "c"), r("b", "k"), r("k", "z")}, true},
		{r("a", "z"), []*pb.RangeDescriptor{r("", "c"), r("b", "k"), r("k", "y")}, false},
		{r("a", "z"), []*pb.RangeDescriptor{r("b", "")}, false},
		{r("a", "z"), []*pb.RangeDescriptor{r("a", "zz")}, true},
	}
	for i, tc := range tests {
		if got := coversSpan(tc.d, tc.spans); got != tc.want {
			t.Errorf("%d: coversSpan(%v, %v) = %v, want %v", i, tc.d, tc.spans, got, tc.want)
		}
	}
}

// TestRetrySoon: a collection the master could not deliver is asked for
// again at the next heartbeat; one the server refused waits staleRetry.
func TestRetrySoon(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection not back", status.Error(codes.Unavailable, "error reading server preface: connection reset by peer"), true},
		{"timed out", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{"our own deadline", context.DeadlineExceeded, true},
		{"refused: merge pending", status.Error(codes.FailedPrecondition, "merge pending"), false},
		{"refused: late delete", status.Error(codes.Aborted, "late delete"), false},
		{"failpoint", errors.New("failpoint master/delete-replica"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retrySoon(tc.err); got != tc.want {
				t.Fatalf("retrySoon(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestConfigListsBlocksCollection: replica GC's proof that a replica is
// stale is the map's descriptor, which can be behind the range's Raft
// configuration (a move promoted the server, and the record of it was cut
// off by a failover). The server's replica, if it lags behind the
// descriptor's generation, passes DeleteReplica's guard; only the leader's
// report of its configuration tells it is a member.
func TestConfigListsBlocksCollection(t *testing.T) {
	t0 := time.Unix(1000, 0)
	leaderReport := func(gen uint64, voters, nonvoters []string) []*pb.RangeStatus {
		return []*pb.RangeStatus{{RangeId: 5, Generation: gen, Leader: true, Range: &pb.RangeDescriptor{RangeId: 5, Generation: gen},
			Voters: voters, Nonvoters: nonvoters}}
	}
	cases := []struct {
		name      string
		gen       uint64 // the leader's report's
		voters    []string
		nonvoters []string
		at        time.Duration // when asked, after the report
		want      bool
	}{
		{name: "a voter of the configuration", gen: 4, voters: []string{"a", "b", "c", "s"}, want: true},
		{name: "a non-voter of the configuration", gen: 4, voters: []string{"a", "b", "c"}, nonvoters: []string{"s"}, want: true},
		{name: "a later generation lists it", gen: 5, voters: []string{"a", "b", "s"}, want: true},
		{name: "not in the configuration", gen: 4, voters: []string{"a", "b", "c"}},
		{name: "a report older than the descriptor proves nothing", gen: 3, voters: []string{"a", "b", "s"}},
		{name: "a report that no longer stands proves nothing", gen: 4, voters: []string{"a", "b", "s"}, at: 4 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newReports()
			foldReport(r, scheduler.Config{}, "a", leaderReport(c.gen, c.voters, c.nonvoters), t0)
			if got := r.configLists(5, "s", 4, t0.Add(c.at)); got != c.want {
				t.Fatalf("configLists = %v, want %v", got, c.want)
			}
		})
	}
}

// TestDeleteReplicaNamesTheGroup: a delete with a proof of removal names
// the removal's generation and the Raft group its descriptor names, so a
// server whose stale copy of a shared group holds the span deletes that
// whole group (partitionserver deleteRemoved), also when the group's
// namesake was merged away and the proof is for another span. A delete
// without a proof names neither.
func TestDeleteReplicaNamesTheGroup(t *testing.T) {
	s, fakes := raceMaster(t)
	for _, tc := range []struct {
		name          string
		removal       *pb.RangeDescriptor
		before, group uint64
	}{
		{"no proof", nil, 0, 0},
		{"its own group", &pb.RangeDescriptor{RangeId: 22, Generation: 5}, 5, 0},
		{"a span of a group", &pb.RangeDescriptor{RangeId: 22, Generation: 6, GroupId: 21}, 6, 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.deleteReplica(context.Background(), "a", 22, tc.removal); err != nil {
				t.Fatal(err)
			}
			f := fakes[0]
			f.mu.Lock()
			got := f.deletes[len(f.deletes)-1]
			f.mu.Unlock()
			if got.GetRangeId() != 22 || got.GetBeforeGeneration() != tc.before || got.GetGroupId() != tc.group {
				t.Fatalf("sent %v, want range 22 before %d in group %d", got, tc.before, tc.group)
			}
		})
	}
}
