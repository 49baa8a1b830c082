package rangeclient

import (
	"context"
	"errors"
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
		{"range not hosted", rpcerr.New(codes.NotFound, rpcerr.ReasonRangeNotFound, "x", nil), Decision{Retry: true, Stale: true}},
		{"busy", rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, "x", nil), Decision{Retry: true, Busy: true}},
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
	busy := rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy, "busy", nil)
	err = Call(ctx, func() ([]string, error) { return []string{"a"}, nil },
		func(context.Context, string) error { n++; return busy }, Options{RetryBusy: true})
	if !errors.Is(err, busy) && rpcerr.Parse(err).Reason != rpcerr.ReasonServerBusy || n < 2 {
		t.Fatalf("busy: %v after %d attempts", err, n)
	}
}
