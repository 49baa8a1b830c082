package partitionserver

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLockMembersGivesUpWithItsContext: a membership change queued behind
// another gives up, as busy, when its request's context ends, instead of
// holding its caller's RPC until the first one is done.
func TestLockMembersGivesUpWithItsContext(t *testing.T) {
	r := &member{membersMu: make(chan struct{}, 1)}
	if err := r.lockMembers(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- r.lockMembers(ctx) }()
	select {
	case err := <-got:
		if !errors.Is(err, ErrBusy) {
			t.Fatalf("second lock while held: %v, want ErrBusy", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second lock still waiting 5 s after its context ended")
	}
	r.unlockMembers()
	if err := r.lockMembers(ctx); err != nil && ctx.Err() == nil {
		t.Fatalf("lock after unlock: %v", err)
	}
}
