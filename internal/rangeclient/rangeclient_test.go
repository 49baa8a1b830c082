package rangeclient

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want Decision
	}{
		{"not leader with hint", rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "x", map[string]string{rpcerr.MetaLeader: "ps2"}), Decision{Retry: true, Leader: "ps2"}},
		{"outcome unknown", rpcerr.New(codes.DeadlineExceeded, rpcerr.ReasonUnavailable, "x", nil), Decision{Retry: true}},
		{"stale range", rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonStaleRange, "x", nil), Decision{Retry: true, Stale: true}},
		{"range not hosted", rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "x", nil), Decision{Retry: true, Stale: true, NotHosted: true}},
		{"busy (throttled)", rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy, "x", nil), Decision{Retry: true, Busy: true}},
		{"busy (leadership transfer)", rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, "x", nil), Decision{Retry: true}},
		{"connection refused", rpcerr.New(codes.Unavailable, "", "x", nil), Decision{Retry: true}},
		{"condition failed", rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonConditionNotSatisfied, "x", nil), Decision{}},
		{"internal", errors.New("boom"), Decision{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Classify(c.err); got != c.want {
				t.Fatalf("Classify = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestCallFollowsHintAndGivesUp(t *testing.T) {
	notLeader := func(hint string) error {
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "no", map[string]string{rpcerr.MetaLeader: hint})
	}
	var tried []string
	var learned string
	err := Call(context.Background(), func() ([]string, error) { return []string{"a", "b"}, nil },
		func(_ context.Context, s string) error {
			tried = append(tried, s)
			if s == "c" {
				return nil
			}
			return notLeader("c")
		}, Options{OnLeader: func(s string) { learned = s }})
	if err != nil || learned != "c" || len(tried) != 2 || tried[1] != "c" {
		t.Fatalf("err %v, tried %v, learned %q", err, tried, learned)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	final := rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonConditionNotSatisfied, "412", nil)
	n := 0
	err = Call(ctx, func() ([]string, error) { return []string{"a", "b"}, nil },
		func(context.Context, string) error { n++; return final }, Options{})
	if err != final || n != 1 {
		t.Fatalf("final error retried: %v after %d attempts", err, n)
	}
	n = 0
	busy := rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy, "busy", nil)
	err = Call(ctx, func() ([]string, error) { return []string{"a"}, nil },
		func(context.Context, string) error { n++; return busy }, Options{RetryBusy: true})
	if !errors.Is(err, busy) && rpcerr.Parse(err).Reason != rpcerr.ReasonServerBusy || n < 2 {
		t.Fatalf("busy: %v after %d attempts", err, n)
	}
}

// script is a scripted fake range: per server, the answers of its
// successive attempts ("ok", "leader:X", "stale", "nothosted", "busy" (throttled),
// "transfer" (busy: leadership moving), "down",
// "silent" (no answer until the attempt's context ends), "final"); a
// server's last answer repeats.
type script map[string][]string

func (s script) answer(ctx context.Context, server string, n int) error {
	as := s[server]
	if len(as) == 0 {
		return rpcerr.New(codes.Unavailable, "", "connection refused", nil)
	}
	a := as[min(n, len(as)-1)]
	switch {
	case a == "ok":
		return nil
	case len(a) > 7 && a[:7] == "leader:":
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, "no", map[string]string{rpcerr.MetaLeader: a[7:]})
	case a == "stale":
		return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonStaleRange, "stale", nil)
	case a == "nothosted":
		return rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "range not hosted", nil)
	case a == "busy":
		return rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy, "busy", nil)
	case a == "transfer":
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, "transfer in progress", nil)
	case a == "silent":
		<-ctx.Done()
		return rpcerr.New(codes.DeadlineExceeded, "", ctx.Err().Error(), nil)
	case a == "final":
		return rpcerr.New(codes.FailedPrecondition, rpcerr.ReasonConditionNotSatisfied, "412", nil)
	}
	return rpcerr.New(codes.Unavailable, "", "connection refused", nil)
}

func TestCallScripted(t *testing.T) {
	cases := []struct {
		name string
		// maps lists the candidates per map version; a refresh moves to
		// the next (the last repeats). A nil entry: no range holds the key.
		maps    [][]string
		script  script
		opts    Options
		timeout time.Duration
		// wantOK, and the attempts in order (server ids).
		wantOK     bool
		wantTried  []string
		wantLeader string
		wantReason string
		// maxTime bounds the call's duration (0: the test timeout).
		maxTime time.Duration
	}{
		{
			name: "leader answers", maps: [][]string{{"a", "b", "c"}},
			script: script{"a": {"ok"}}, wantOK: true, wantTried: []string{"a"}, wantLeader: "a",
		},
		{
			name: "follows hint before the rest", maps: [][]string{{"a", "b", "c"}},
			script: script{"a": {"leader:c"}, "c": {"ok"}}, wantOK: true, wantTried: []string{"a", "c"}, wantLeader: "c",
		},
		{
			name: "dead leader, next replica", maps: [][]string{{"a", "b", "c"}},
			script: script{"a": {"down"}, "b": {"ok"}}, wantOK: true, wantTried: []string{"a", "b"}, wantLeader: "b",
		},
		{
			name: "silent leader abandoned after the attempt timeout", maps: [][]string{{"a", "b", "c"}},
			script: script{"a": {"silent"}, "b": {"ok"}}, opts: Options{AttemptTimeout: 50 * time.Millisecond},
			wantOK: true, wantTried: []string{"a", "b"}, wantLeader: "b", maxTime: time.Second,
		},
		{
			name: "silent leader without attempt timeout waits for the request", maps: [][]string{{"a", "b"}},
			script: script{"a": {"silent"}, "b": {"ok"}}, timeout: 150 * time.Millisecond,
			wantTried: []string{"a"}, maxTime: time.Second,
		},
		{
			name: "silent leader, election: next round finds the new leader", maps: [][]string{{"a", "b", "c"}},
			script: script{"a": {"silent"}, "b": {"leader:a", "ok"}, "c": {"leader:a"}},
			opts:   Options{AttemptTimeout: 30 * time.Millisecond},
			wantOK: true, wantTried: []string{"a", "b", "c", "a", "b"}, wantLeader: "b", maxTime: time.Second,
		},
		{
			name: "stale answer refreshes the map", maps: [][]string{{"a"}, {"d", "e"}},
			script: script{"a": {"stale"}, "d": {"ok"}}, wantOK: true, wantTried: []string{"a", "d"}, wantLeader: "d",
		},
		{
			// The map names a as the leader, but a never created its member
			// (a split it did not apply): b, listed too, leads.
			name: "a replica that does not host the range: the next one", maps: [][]string{{"a", "b", "c"}},
			script: script{"a": {"nothosted"}, "b": {"ok"}}, wantOK: true, wantTried: []string{"a", "b"}, wantLeader: "b",
		},
		{
			name: "no replica hosts it: a refreshed map", maps: [][]string{{"a", "b"}, {"d"}},
			script: script{"a": {"nothosted"}, "b": {"nothosted"}, "d": {"ok"}}, wantOK: true, wantTried: []string{"a", "b", "d"}, wantLeader: "d",
		},
		{
			name: "no range for the key until a refresh", maps: [][]string{nil, {"a"}},
			script: script{"a": {"ok"}}, wantOK: true, wantTried: []string{"a"}, wantLeader: "a",
		},
		{
			name: "final error is not retried", maps: [][]string{{"a", "b"}},
			script: script{"a": {"final"}}, wantTried: []string{"a"}, wantReason: rpcerr.ReasonConditionNotSatisfied,
		},
		{
			name: "busy handed back", maps: [][]string{{"a", "b"}},
			script: script{"a": {"busy"}}, wantTried: []string{"a"}, wantReason: rpcerr.ReasonServerBusy,
		},
		{
			name: "busy in a leadership transfer retried by every caller", maps: [][]string{{"a"}},
			script: script{"a": {"transfer", "transfer", "ok"}},
			wantOK: true, wantTried: []string{"a", "a", "a"}, wantLeader: "a",
		},
		{
			name: "busy retried by internal callers", maps: [][]string{{"a"}},
			script: script{"a": {"busy", "busy", "ok"}}, opts: Options{RetryBusy: true},
			wantOK: true, wantTried: []string{"a", "a", "a"}, wantLeader: "a",
		},
		{
			name: "rounds cap", maps: [][]string{{"a", "b"}},
			script: script{}, opts: Options{Rounds: 2},
			wantTried: []string{"a", "b", "a", "b"}, wantReason: "",
		},
		{
			name: "deadline: no new attempt after it", maps: [][]string{{"a"}},
			script: script{"a": {"silent"}}, opts: Options{AttemptTimeout: 40 * time.Millisecond, Deadline: time.Now().Add(100 * time.Millisecond)},
			wantReason: rpcerr.ReasonUnavailable, maxTime: 400 * time.Millisecond,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			version := 0
			calls := map[string]int{}
			var tried []string
			leader := ""
			o := c.opts
			if !o.Deadline.IsZero() {
				// Relative to the case's start, not the table's.
				o.Deadline = time.Now().Add(100 * time.Millisecond)
			}
			o.MinBackoff = time.Millisecond
			o.OnLeader = func(s string) { leader = s }
			o.Refresh = func(context.Context) { version = min(version+1, len(c.maps)-1) }
			ctx := context.Background()
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			} else {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
			}
			start := time.Now()
			err := Call(ctx, func() ([]string, error) {
				m := c.maps[version]
				if m == nil {
					return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonStaleRange, "no range", nil)
				}
				return append([]string(nil), m...), nil
			}, func(ctx context.Context, s string) error {
				tried = append(tried, s)
				n := calls[s]
				calls[s]++
				return c.script.answer(ctx, s, n)
			}, o)
			took := time.Since(start)
			if (err == nil) != c.wantOK {
				t.Fatalf("err %v, want ok %v", err, c.wantOK)
			}
			if c.wantTried != nil && fmt.Sprint(tried) != fmt.Sprint(c.wantTried) {
				t.Errorf("tried %v, want %v", tried, c.wantTried)
			}
			if c.wantOK && leader != c.wantLeader {
				t.Errorf("leader %q, want %q", leader, c.wantLeader)
			}
			if !c.wantOK && c.wantReason != "" && rpcerr.Parse(err).Reason != c.wantReason {
				t.Errorf("err %v, want reason %s", err, c.wantReason)
			}
			if c.maxTime > 0 && took > c.maxTime {
				t.Errorf("took %v, want at most %v", took, c.maxTime)
			}
		})
	}
}

// TestCallDoesNotWaitForTheMapOwner: while the map's owner (the master)
// elects a leader, a refresh gets no answer; the range's replicas elect
// theirs meanwhile, and the next round must ask them rather than wait for
// the map (issue 10: a range's leader change during a master election
// cost both elections).
func TestCallDoesNotWaitForTheMapOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// a, the old leader, is dead; b and c know no leader in the first
	// round, b leads from the second.
	s := script{"a": {"down"}, "b": {"down", "ok"}, "c": {"down"}}
	calls := map[string]int{}
	refreshes := 0
	leader := ""
	err := Call(ctx, func() ([]string, error) { return []string{"a", "b", "c"}, nil },
		func(ctx context.Context, server string) error {
			n := calls[server]
			calls[server]++
			return s.answer(ctx, server, n)
		}, Options{
			OnLeader: func(s string) { leader = s },
			// No master leader: the map read answers nothing until its
			// context ends.
			Refresh:     func(ctx context.Context) { refreshes++; <-ctx.Done() },
			RefreshWait: 20 * time.Millisecond,
			MinBackoff:  time.Millisecond,
		})
	if err != nil {
		t.Fatalf("Call waited for the map: %v (after %d refreshes)", err, refreshes)
	}
	if leader != "b" || refreshes != 1 {
		t.Fatalf("leader %q after %d refreshes, want b after 1", leader, refreshes)
	}
}
