package master

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestClockVerdicts is the clock rule: a server is skewed when it agrees
// (within the bound) with fewer than a majority of the servers heard from
// while some server agrees with a majority; offsets are reported from the
// median.
func TestClockVerdicts(t *testing.T) {
	s := time.Second
	bound := 10 * s
	for _, tc := range []struct {
		name    string
		offsets map[string]time.Duration
		bound   time.Duration
		of      int // servers heard from; 0: those in offsets
		was     map[string]bool
		skewed  []string
		offset  map[string]time.Duration // checked where given
	}{
		{name: "none", offsets: nil, bound: bound},
		{name: "agree", offsets: map[string]time.Duration{"a": 0, "b": 2 * s, "c": -3 * s}, bound: bound,
			offset: map[string]time.Duration{"a": 0, "b": 2 * s, "c": -3 * s}},
		{name: "one ahead", offsets: map[string]time.Duration{"a": 0, "b": s, "c": 11*s + s/2}, bound: bound, skewed: []string{"c"},
			offset: map[string]time.Duration{"c": 10*s + s/2}},
		{name: "one behind", offsets: map[string]time.Duration{"a": 0, "b": s, "c": -20 * s}, bound: bound, skewed: []string{"c"}},
		{name: "at the bound is not over", offsets: map[string]time.Duration{"a": 0, "b": 0, "c": 10 * s}, bound: bound},
		// The master's clock is an hour off: every offset shifts alike.
		{name: "master off", offsets: map[string]time.Duration{"a": time.Hour, "b": time.Hour + s, "c": time.Hour - s}, bound: bound,
			offset: map[string]time.Duration{"a": 0, "b": s, "c": -s}},
		{name: "master off and one server", offsets: map[string]time.Duration{"a": -time.Hour, "b": -time.Hour, "c": -time.Hour + time.Minute}, bound: bound,
			skewed: []string{"c"}},
		// Four: the mean of the middle two, both healthy.
		{name: "four, one ahead", offsets: map[string]time.Duration{"a": 0, "b": s, "c": 2 * s, "d": time.Minute}, bound: bound, skewed: []string{"d"}},
		{name: "bound 0: off", offsets: map[string]time.Duration{"a": 0, "b": 0, "c": time.Hour}, bound: 0},
		{name: "one server: its own reference", offsets: map[string]time.Duration{"a": time.Hour}, bound: bound,
			offset: map[string]time.Duration{"a": 0}},
		// Two apart: which is right cannot be told, so neither.
		{name: "two apart", offsets: map[string]time.Duration{"a": 0, "b": 30 * s}, bound: bound,
			offset: map[string]time.Duration{"a": -15 * s, "b": 15 * s}},
		{name: "two close", offsets: map[string]time.Duration{"a": 0, "b": 9 * s}, bound: bound},
		// An even split has no majority: nobody (the median rule flagged
		// all four, and every leader refused writes).
		{name: "four, two and two", offsets: map[string]time.Duration{"a": 0, "b": 0, "c": 21 * s, "d": 21 * s}, bound: bound},
		{name: "five, three and two", offsets: map[string]time.Duration{"a": 0, "b": 0, "e": s, "c": 21 * s, "d": 21 * s}, bound: bound,
			skewed: []string{"c", "d"}},
		// Two of three share a clock: theirs is taken as right.
		{name: "three, two agree off", offsets: map[string]time.Duration{"a": 0, "b": 21 * s, "c": 21 * s}, bound: bound, skewed: []string{"a"}},
		// A chain within the bound link by link: every server agrees
		// with a majority.
		{name: "three in a chain", offsets: map[string]time.Duration{"a": 0, "b": 8 * s, "c": 16 * s}, bound: bound},
		// Right after a master failover only two of three servers are
		// confirmed, one off: no majority agrees yet, nobody is flagged.
		{name: "two of three confirmed, apart", offsets: map[string]time.Duration{"a": 45 * s, "b": 0}, of: 3, bound: bound},
		{name: "three of three confirmed", offsets: map[string]time.Duration{"a": 45 * s, "b": 0, "c": 0}, of: 3, bound: bound, skewed: []string{"a"}},
		// Hysteresis: a server flagged last time is cleared only within
		// half the bound of a majority.
		{name: "was skewed, within the bound, not half", offsets: map[string]time.Duration{"a": 0, "b": 0, "c": 9 * s}, bound: bound,
			was: map[string]bool{"c": true}, skewed: []string{"c"}},
		{name: "was skewed, within half the bound", offsets: map[string]time.Duration{"a": 0, "b": 0, "c": 4 * s}, bound: bound,
			was: map[string]bool{"c": true}},
		{name: "was not skewed, within the bound", offsets: map[string]time.Duration{"a": 0, "b": 0, "c": 9 * s}, bound: bound},
	} {
		of := tc.of
		if of == 0 {
			of = len(tc.offsets)
		}
		got := clockVerdicts(tc.offsets, of, tc.bound, tc.was)
		if len(got) != len(tc.offsets) {
			t.Fatalf("%s: %d verdicts for %d offsets", tc.name, len(got), len(tc.offsets))
		}
		want := map[string]bool{}
		for _, id := range tc.skewed {
			want[id] = true
		}
		for id, v := range got {
			if v.skewed != want[id] {
				t.Errorf("%s: %s skewed=%v (offset %v), want %v", tc.name, id, v.skewed, v.offset, want[id])
			}
			if o, ok := tc.offset[id]; ok && v.offset != o {
				t.Errorf("%s: %s offset %v, want %v", tc.name, id, v.offset, o)
			}
		}
	}
}

// TestObserveClock: the offset is the sent time less the receive time;
// of the samples within clockFresh the highest (least delayed) is kept, a
// stale one gives way, and a server that sends no clock has none (older
// servers are not compared).
func TestObserveClock(t *testing.T) {
	r := newReports()
	now := time.Now()
	r.observeClock("a", now.Add(5*time.Second).UnixNano(), now)
	r.observeClock("b", now.Add(-time.Second).UnixNano(), now)
	r.observeClock("old", 0, now)
	if c := r.clocks["a"]; c.offset != 5*time.Second {
		t.Fatalf("a: offset %v, want 5s", c.offset)
	}
	if _, ok := r.clocks["old"]; ok {
		t.Fatal("a server that sent no clock has a measurement")
	}
	// Delayed by 3 s: the better sample stands.
	later := now.Add(time.Second)
	r.observeClock("a", later.Add(2*time.Second).UnixNano(), later)
	if c := r.clocks["a"]; c.offset != 5*time.Second {
		t.Fatalf("a delayed heartbeat: offset %v, want 5s kept", c.offset)
	}
	// Once clockWindow heartbeats say otherwise it gives way (a clock
	// stepped back is seen).
	for i := 1; i <= clockWindow-2; i++ {
		at := later.Add(time.Duration(i) * 500 * time.Millisecond)
		r.observeClock("a", at.UnixNano(), at)
		if c := r.clocks["a"]; c.offset != 5*time.Second {
			t.Fatalf("a after %d heartbeats at 0: offset %v, want 5s kept within the window", i, c.offset)
		}
	}
	at := later.Add(time.Duration(clockWindow-1) * 500 * time.Millisecond)
	r.observeClock("a", at.UnixNano(), at)
	if c := r.clocks["a"]; c.offset != 2*time.Second {
		t.Fatalf("a with 5s out of the window: offset %v, want the delayed 2s", c.offset)
	}
	stale := now.Add(clockFresh)
	r.observeClock("a", stale.UnixNano(), stale)
	if c := r.clocks["a"]; c.offset != 0 {
		t.Fatalf("a after %d heartbeats at 0: offset %v, want 0", clockWindow, c.offset)
	}
	if v := r.clockVerdictsAt(10*time.Second, stale); len(v) != 1 {
		t.Fatalf("verdicts %v: want only a's (b's measurement is stale)", v)
	}
	// After a silence of clockFresh the first heartbeat is not judged,
	// however far off it looks (it may have waited out the silence); the
	// next one is, and the better of the two stands.
	resumed := stale.Add(clockFresh)
	r.observeClock("a", resumed.Add(-time.Minute).UnixNano(), resumed)
	if v := r.clockVerdictsAt(10*time.Second, resumed); len(v) != 0 {
		t.Fatalf("verdicts %v after a silence: want none on one heartbeat", v)
	}
	next := resumed.Add(500 * time.Millisecond)
	r.observeClock("a", next.UnixNano(), next)
	if v := r.clockVerdictsAt(10*time.Second, next); len(v) != 1 || v["a"].skewed {
		t.Fatalf("verdicts %v after the second heartbeat: want a's, not skewed", v)
	}
	r.observeClock("a", 0, stale)
	if _, ok := r.clocks["a"]; ok {
		t.Fatal("a server that stopped sending its clock kept a measurement")
	}
}

// TestHeartbeatClockVerdict: the master measures each server's clock from
// a crafted heartbeat's sent time, answers the skewed one its verdict and
// offset, the scheduler's snapshot marks it (no leadership), and so does
// the partition map's server list (ctl servers).
func TestHeartbeatClockVerdict(t *testing.T) {
	s, _ := raceMaster(t)
	beat := func(id string, off time.Duration) *pb.HeartbeatResponse {
		t.Helper()
		resp, err := (&service{s: s}).Heartbeat(context.Background(), &pb.HeartbeatRequest{
			Server:       &pb.ServerInfo{ServerId: id, GrpcAddr: "local-" + id, RaftAddr: "127.0.0.1:1"},
			Full:         true,
			SentUnixNano: time.Now().Add(off).UnixNano(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	beat("a", 0)
	beat("b", 0)
	// One heartbeat is not judged (clockConfirm): the first after a
	// silence may be as delayed as the silence was long.
	if resp := beat("c", time.Minute); resp.GetClockSkewed() {
		t.Fatal("c judged on its first heartbeat")
	}
	// Heartbeats back to back count as one (clockConfirmGap): the next
	// round comes as a server's next heartbeat would.
	time.Sleep(clockConfirmGap)
	beat("a", 0)
	beat("b", 0)
	resp := beat("c", time.Minute)
	if !resp.GetClockSkewed() {
		t.Fatalf("c, a minute ahead: not skewed (offset %v)", time.Duration(resp.GetClockOffsetNanos()))
	}
	if o := time.Duration(resp.GetClockOffsetNanos()); o < 59*time.Second || o > 61*time.Second {
		t.Fatalf("c's offset %v, want about 1m", o)
	}
	if resp := beat("a", 0); resp.GetClockSkewed() {
		t.Fatalf("a skewed, offset %v", time.Duration(resp.GetClockOffsetNanos()))
	}
	skewed := map[string]bool{}
	for _, sv := range s.snapshot(time.Now()).Servers {
		skewed[sv.ID] = sv.ClockSkewed
	}
	if !skewed["c"] || skewed["a"] || skewed["b"] {
		t.Fatalf("snapshot skewed %v, want only c", skewed)
	}
	// The partition map (ctl servers) carries the verdict and offset.
	m, _ := s.partitionMap()
	for _, sv := range m.GetServers() {
		if o := time.Duration(sv.GetClockOffsetNanos()); sv.GetClockSkewed() != (sv.GetServerId() == "c") || (sv.GetServerId() == "c") != (o > 59*time.Second) {
			t.Fatalf("map: %s skewed=%v offset %v, want only c, about 1m", sv.GetServerId(), sv.GetClockSkewed(), o)
		}
	}
}

// TestClockPartialConfirmation: right after a master failover the
// servers' second heartbeats arrive one by one; while only {skewed a,
// healthy b} are confirmed, b is flagged too (the two-server rule).
func TestClockPartialConfirmation(t *testing.T) {
	var r reports
	t0 := time.Unix(1_000_000, 0)
	hb := func(id string, off time.Duration, at time.Duration) {
		now := t0.Add(at)
		r.observeClock(id, now.Add(off).UnixNano(), now)
	}
	hb("a", 45*time.Second, 0)
	hb("b", 0, 10*time.Millisecond)
	hb("c", 0, 20*time.Millisecond)
	hb("a", 45*time.Second, 500*time.Millisecond)
	hb("b", 0, 510*time.Millisecond) // b's answer is computed here
	v := r.clockVerdictsAt(10*time.Second, t0.Add(510*time.Millisecond))
	if v["b"].skewed {
		t.Fatalf("healthy b answered skewed before c's second heartbeat: %v", v)
	}
}

// TestStaleHeartbeatsConfirmOnce: a server cut off for 20 s whose
// timed-out heartbeats (stamped during the cut, still in the TCP stream)
// are processed at the heal, back to back: they count as one heartbeat
// (clockConfirmGap), so two stale ones do not confirm a measurement 16 s
// behind (the review's case); the next fresh one does, with its better
// offset.
func TestStaleHeartbeatsConfirmOnce(t *testing.T) {
	var r reports
	t0 := time.Unix(1_000_000, 0)
	for i := 0; i < 4; i++ { // all healthy before the cut
		at := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		for _, id := range []string{"a", "b", "c"} {
			r.observeClock(id, at.UnixNano(), at)
		}
	}
	last := t0.Add(1500 * time.Millisecond)
	heal := last.Add(20 * time.Second)
	for i := 0; i < 40; i++ { // b and c keep heartbeating
		at := last.Add(time.Duration(i+1) * 500 * time.Millisecond)
		r.observeClock("b", at.UnixNano(), at)
		r.observeClock("c", at.UnixNano(), at)
	}
	// a's stale heartbeats, stamped 0.5 s and 4 s after its last one, land at the heal.
	r.observeClock("a", last.Add(500*time.Millisecond).UnixNano(), heal)
	r.observeClock("a", last.Add(4*time.Second).UnixNano(), heal.Add(time.Millisecond))
	v := r.clockVerdictsAt(10*time.Second, heal.Add(time.Millisecond))
	if v["a"].skewed {
		t.Fatalf("healthy a judged skewed on two stale heartbeats: %v", v["a"])
	}
}

// TestClockVerdictsMatchPairwise: the rule counts agreements over a window
// of the sorted offsets; on random sets (ties and offsets exactly at the
// bound included) its verdicts are those of comparing every pair.
func TestClockVerdictsMatchPairwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 23))
	bound := 10 * time.Second
	for round := 0; round < 2000; round++ {
		n := 1 + rng.IntN(9)
		offsets := map[string]time.Duration{}
		was := map[string]bool{}
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("s%d", i)
			offsets[id] = time.Duration(rng.IntN(7)) * 5 * time.Second // multiples of half the bound: ties at the edges
			was[id] = rng.IntN(3) == 0
		}
		of := n + rng.IntN(2)
		majority := of/2 + 1
		agree := map[string]int{}
		anchored := false
		for id, o := range offsets {
			w := bound
			if was[id] {
				w = bound / 2
			}
			for _, p := range offsets {
				if d := o - p; d <= w && d >= -w {
					agree[id]++
				}
			}
			anchored = anchored || agree[id] >= majority
		}
		got := clockVerdicts(offsets, of, bound, was)
		for id := range offsets {
			if want := anchored && agree[id] < majority; got[id].skewed != want {
				t.Fatalf("round %d: offsets %v, was %v, of %d: %s skewed=%v, pairwise %v", round, offsets, was, of, id, got[id].skewed, want)
			}
		}
	}
}

// TestClockStepsSeenWithinWindow: the chaos clock faults' cases (session
// 24). A measurement is the best of the last clockWindow heartbeats, not
// of the last clockFresh: a clock set behind is flagged, and a clock set
// right is cleared, within that many heartbeats; and a server set right
// while another is set ahead no longer holds its old reading, which split
// four servers two against two and flagged nobody.
func TestClockStepsSeenWithinWindow(t *testing.T) {
	const bound = 10 * time.Second
	// within: heartbeats every 500 ms, a step is judged within 2 s.
	const within = 4
	t0 := time.Unix(1_000_000, 0)
	type step struct {
		at  int // heartbeat round from which the offset applies
		off time.Duration
	}
	for _, tc := range []struct {
		name   string
		clocks map[string][]step
		check  string
		// skewedFrom and clearFrom: the round from which check's
		// verdict must be (and stay) skewed, and not skewed (-1: never).
		skewedFrom, clearFrom int
	}{
		{name: "set behind", check: "c", skewedFrom: 10 + within, clearFrom: -1,
			clocks: map[string][]step{"c": {{10, -90 * time.Second}}}},
		// Ahead for 3 s (a chaos fault's span), then right: the highest
		// of the last 10 s held it flagged 7 s more.
		{name: "set right after running ahead", check: "c", skewedFrom: -1, clearFrom: 16 + within,
			clocks: map[string][]step{"c": {{10, 90 * time.Second}, {16, 0}}}},
		{name: "one set right as another is set ahead", check: "d", skewedFrom: 16 + within, clearFrom: -1,
			clocks: map[string][]step{"c": {{10, 90 * time.Second}, {16, 0}}, "d": {{16, 90 * time.Second}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r reports
			for round := 0; round < 40; round++ {
				now := t0.Add(time.Duration(round) * 500 * time.Millisecond)
				for _, id := range []string{"a", "b", "c", "d"} {
					var off time.Duration
					for _, st := range tc.clocks[id] {
						if round >= st.at {
							off = st.off
						}
					}
					r.observeClock(id, now.Add(off).UnixNano(), now)
				}
				v := r.clockVerdictsAt(bound, now)[tc.check]
				for id, cv := range r.clockVerdictsAt(bound, now) {
					if r.skewed == nil {
						r.skewed = map[string]bool{}
					}
					r.skewed[id] = cv.skewed
				}
				if tc.skewedFrom >= 0 && round >= tc.skewedFrom && !v.skewed {
					t.Fatalf("round %d: %s not skewed (offset %v), want skewed from round %d", round, tc.check, v.offset, tc.skewedFrom)
				}
				if tc.clearFrom >= 0 && round >= tc.clearFrom && v.skewed {
					t.Fatalf("round %d: %s still skewed (offset %v), want clear from round %d", round, tc.check, v.offset, tc.clearFrom)
				}
			}
		})
	}
}

// TestFastHeartbeatsJudged: a server heartbeating every 100 ms (under
// clockConfirmGap) is judged: its heartbeats count once the gap has
// passed since the last counted one. Before, each was under the gap from
// the one before, all counted as one, and its clock was never judged: a
// server a minute ahead kept its leaderships.
func TestFastHeartbeatsJudged(t *testing.T) {
	var r reports
	t0 := time.Unix(1_000_000, 0)
	var v map[string]clockVerdict
	for i := 0; i < 30; i++ { // 3 s of heartbeats every 100 ms
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		for _, id := range []string{"a", "b", "c"} {
			off := time.Duration(0)
			if id == "c" {
				off = time.Minute
			}
			r.observeClock(id, now.Add(off).UnixNano(), now)
		}
		v = r.clockVerdictsAt(10*time.Second, now)
	}
	if !v["c"].skewed || v["a"].skewed || v["b"].skewed {
		t.Fatalf("verdicts after 3 s of 100 ms heartbeats: %v, want c (a minute ahead) skewed alone", v)
	}
}
