package master

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

func TestDrainRefusal(t *testing.T) {
	up, down := serverView{up: true}, serverView{}
	upDraining, downDraining := serverView{up: true, draining: true}, serverView{draining: true}
	for _, tc := range []struct {
		name    string
		id      string
		undo    bool
		servers map[string]serverView
		want    error
		say     string // in the refusal's text
	}{
		{"four up", "a", false, map[string]serverView{"a": up, "b": up, "c": up, "d": up}, nil, ""},
		{"three up", "a", false, map[string]serverView{"a": up, "b": up, "c": up}, ErrDrainTooFew, "leaves 2 live servers for replication factor 3 (other servers: 0 down, 0 draining)"},
		{"a down server is no room", "a", false, map[string]serverView{"a": up, "b": up, "c": up, "d": down}, ErrDrainTooFew, "leaves 2 live servers for replication factor 3 (other servers: 1 down, 0 draining)"},
		{"two down", "a", false, map[string]serverView{"a": up, "b": up, "c": down, "d": down, "e": up}, ErrDrainTooFew, "leaves 2 live servers for replication factor 3 (other servers: 2 down, 0 draining)"},
		{"a draining server is no room", "a", false, map[string]serverView{"a": up, "b": up, "c": up, "d": upDraining}, ErrDrainTooFew, "(other servers: 0 down, 1 draining)"},
		{"down and draining counts once, as draining", "a", false, map[string]serverView{"a": up, "b": up, "c": up, "d": downDraining}, ErrDrainTooFew, "(other servers: 0 down, 1 draining)"},
		{"the target's own liveness does not matter", "a", false, map[string]serverView{"a": down, "b": up, "c": up, "d": up}, nil, ""},
		{"the target already draining", "a", false, map[string]serverView{"a": upDraining, "b": up, "c": up, "d": up}, nil, ""},
		{"undo with every other server down", "a", true, map[string]serverView{"a": upDraining, "b": down, "c": down}, nil, ""},
		{"undo of the only server", "a", true, map[string]serverView{"a": downDraining}, nil, ""},
		{"unknown", "z", false, map[string]serverView{"a": up, "b": up, "c": up, "d": up}, ErrUnknownServer, `"z"`},
		{"undo of an unknown server", "z", true, map[string]serverView{"a": up}, ErrUnknownServer, `"z"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := drainRefusal(tc.id, tc.undo, tc.servers, 3)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("refusal %q does not say %q", err, tc.say)
			}
		})
	}
}

// TestDrainViews: drainRefusal sees a server as up by the master's one
// liveness rule (serverUp): heard within the server timeout; one silent
// longer, or never heard in this term, is down.
func TestDrainViews(t *testing.T) {
	cfg := DefaultConfig()
	s, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	now := time.Now()
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		s.fsm.st.servers[id] = &pb.ServerInfo{ServerId: id, Draining: id == "e"}
	}
	s.reports.lastSeen["a"] = now.Add(-time.Second)
	s.reports.lastSeen["b"] = now.Add(-cfg.ServerTimeout + time.Millisecond)
	s.reports.lastSeen["c"] = now.Add(-cfg.ServerTimeout)
	s.reports.lastSeen["e"] = now
	want := map[string]serverView{"a": {up: true}, "b": {up: true}, "c": {}, "d": {}, "e": {up: true, draining: true}}
	got := s.serverViews(now)
	if len(got) != len(want) {
		t.Fatalf("views %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("view of %s: %+v, want %+v", id, got[id], w)
		}
	}
	if err := drainRefusal("a", false, got, cfg.ReplicationFactor); !errors.Is(err, ErrDrainTooFew) {
		t.Fatalf("draining a with b up, c and d down, e draining: %v, want ErrDrainTooFew", err)
	}
}
