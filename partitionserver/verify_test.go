package partitionserver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeRounds is a leadership round that counts its calls and, while hold is
// set, blocks until release is closed.
type fakeRounds struct {
	mu      sync.Mutex
	n       int
	hold    bool
	started chan struct{} // receives once per held round
	release chan struct{}
	err     error
}

func (f *fakeRounds) round() error {
	f.mu.Lock()
	f.n++
	hold := f.hold
	f.mu.Unlock()
	if hold {
		f.started <- struct{}{}
		<-f.release
	}
	return f.err
}

func (f *fakeRounds) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (v *verifyCoalescer) idle() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.running
}

func (v *verifyCoalescer) queued() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.waiting)
}

func TestVerifyCoalescerSpacing(t *testing.T) {
	errLost := errors.New("lost leadership")
	tests := []struct {
		name string
		// together is how many reads wait while the first round runs
		// (0: one read at a time).
		together   int
		err        error
		wantRounds int
		wantSpaced bool
	}{
		{name: "lone reader starts every round at once", together: 0, wantRounds: 20},
		{name: "reads that come together share a spaced round", together: 5, wantRounds: 2, wantSpaced: true},
		{name: "every waiter gets the round's error", together: 3, err: errLost, wantRounds: 2, wantSpaced: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeRounds{err: tc.err, started: make(chan struct{}, 1), release: make(chan struct{})}
			// Long enough that a slow CI machine enqueues the readers well
			// within it, so the second round must wait it out.
			v := &verifyCoalescer{round: f.round, spacing: time.Second}
			ctx := context.Background()
			if tc.together == 0 {
				for i := 0; i < tc.wantRounds; i++ {
					if err := v.verify(ctx); !errors.Is(err, tc.err) {
						t.Fatalf("read %d: %v, want %v", i, err, tc.err)
					}
					waitFor(t, v.idle)
				}
				if v.spaced != 0 {
					t.Errorf("a lone reader's round waited out the spacing %d times", v.spaced)
				}
			} else {
				f.hold = true
				errs := make(chan error, tc.together+1)
				go func() { errs <- v.verify(ctx) }()
				<-f.started // the first round runs with one read in it
				f.mu.Lock()
				f.hold = false
				f.mu.Unlock()
				for i := 0; i < tc.together; i++ {
					go func() { errs <- v.verify(ctx) }()
				}
				waitFor(t, func() bool { return v.queued() == tc.together })
				close(f.release)
				for i := 0; i < tc.together+1; i++ {
					if err := <-errs; !errors.Is(err, tc.err) {
						t.Fatalf("read: %v, want %v", err, tc.err)
					}
				}
				waitFor(t, v.idle)
			}
			if got := f.count(); got != tc.wantRounds {
				t.Errorf("rounds = %d, want %d", got, tc.wantRounds)
			}
			if got := v.spaced > 0; got != tc.wantSpaced {
				t.Errorf("spaced = %d, want spaced %v", v.spaced, tc.wantSpaced)
			}
		})
	}
}
