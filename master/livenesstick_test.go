package master

import (
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// TestLivenessTickAcrossTerms: a master that regains the lead logs no
// server down or up from the heard times of its earlier term; a server
// silent a full timeout into the new term is logged down once.
func TestLivenessTickAcrossTerms(t *testing.T) {
	// No Raft and no loops: the test plays the terms.
	s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1}
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	for _, id := range []string{"a", "b"} {
		apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: &pb.ServerInfo{ServerId: id}})
	}
	timeout := s.cfg.ServerTimeout
	kinds := func(evs []*pb.Event) map[string]string {
		out := map[string]string{}
		for _, e := range evs {
			out[e.GetServers()[0]] = e.GetKind().Name()
		}
		return out
	}
	var lv livenessView
	t0 := time.Now()
	if evs, _ := s.livenessTick(&lv, 3, t0); len(evs) != 0 {
		t.Fatalf("first tick of term 3: %v", kinds(evs))
	}
	// a heartbeats, b falls silent: b down in term 3.
	s.reports.greet([]string{"a"}, t0.Add(timeout))
	if evs, changed := s.livenessTick(&lv, 3, t0.Add(timeout+time.Millisecond)); !changed || len(evs) != 1 || kinds(evs)["b"] != "server-down" {
		t.Fatalf("b silent for the timeout: %v", kinds(evs))
	}
	// The lead is lost, and regained in term 5 long after: the heard
	// times are term 3's.
	later := t0.Add(70 * time.Second)
	if evs, _ := s.livenessTick(&lv, 5, later); len(evs) != 0 {
		t.Errorf("first tick after regaining the lead: %v, want no event", kinds(evs))
	}
	if !lv.alive["a"] || !lv.alive["b"] {
		t.Errorf("liveness after regaining the lead %v: every server gets a full timeout", lv.alive)
	}
	if evs, _ := s.livenessTick(&lv, 5, later.Add(timeout/2)); len(evs) != 0 {
		t.Errorf("within the timeout of the new term: %v", kinds(evs))
	}
	// Neither is heard in term 5: both down a timeout in, once.
	if evs, _ := s.livenessTick(&lv, 5, later.Add(timeout+time.Millisecond)); len(evs) != 2 || kinds(evs)["a"] != "server-down" || kinds(evs)["b"] != "server-down" {
		t.Errorf("silent a timeout into term 5: %v", kinds(evs))
	}
}

// TestGreetTerm: once per server and term; a server the first greet of a
// term missed (the liveness loop read the map before the term's barrier)
// is greeted by the next, one greeted keeps what was heard since, and an
// older term changes nothing.
func TestGreetTerm(t *testing.T) {
	r := newReports()
	t0 := time.Now()
	r.greetTerm(5, []string{"a"}, t0)
	r.lastSeen["a"] = t0.Add(time.Second) // a heartbeat
	r.greetTerm(5, []string{"a", "b"}, t0.Add(2*time.Second))
	r.greetTerm(4, []string{"c"}, t0.Add(3*time.Second))
	seen := r.seen()
	if !seen["a"].Equal(t0.Add(time.Second)) || !seen["b"].Equal(t0.Add(2*time.Second)) {
		t.Errorf("term 5: %v", seen)
	}
	if _, ok := seen["c"]; ok {
		t.Errorf("an older term's greet counted: %v", seen)
	}
	r.greetTerm(6, []string{"a"}, t0.Add(4*time.Second))
	if !r.seen()["a"].Equal(t0.Add(4 * time.Second)) {
		t.Errorf("term 6: %v", r.seen())
	}
}
