package partitionserver

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeRounds is a leadership round that counts its calls and records how
// many reads each served; the first holds calls block until released.
type fakeRounds struct {
	v       *verifyCoalescer
	mu      sync.Mutex
	batches []int
	holds   int
	started chan struct{} // receives once per held round
	release chan struct{} // one receive per held round
	err     error
}

func newFakeRounds(holds int, spacing time.Duration, err error) *fakeRounds {
	f := &fakeRounds{holds: holds, started: make(chan struct{}, holds+1), release: make(chan struct{}), err: err}
	f.v = newVerifyCoalescer(f.round, spacing)
	return f
}

func (f *fakeRounds) round() error {
	f.mu.Lock()
	// Called after the loop took its batch: what it serves is lastN.
	f.batches = append(f.batches, f.v.lastN)
	hold := f.holds > 0
	f.holds--
	f.mu.Unlock()
	if hold {
		f.started <- struct{}{}
		<-f.release
	}
	return f.err
}

func (f *fakeRounds) served() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.batches...)
}

func (v *verifyCoalescer) idle() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.running
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestVerifyCoalescerLoneReader(t *testing.T) {
	f := newFakeRounds(0, time.Minute, nil)
	for i := 0; i < 20; i++ {
		if err := f.v.verify(context.Background()); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		waitFor(t, f.v.idle)
	}
	if n := f.v.spaced.Load(); n != 0 {
		t.Errorf("a lone reader's round waited for company %d times", n)
	}
	if got := len(f.served()); got != 20 {
		t.Errorf("rounds = %d, want 20", got)
	}
}

// TestVerifyCoalescerWaitsForCompany: after a round that served two reads,
// the next waits until two are queued (arriving) or until the spacing has
// passed (not arriving), and every waiter gets its round's answer.
func TestVerifyCoalescerWaitsForCompany(t *testing.T) {
	errLost := errors.New("lost leadership")
	tests := []struct {
		name    string
		arrive  bool // a second read joins the third round
		spacing time.Duration
		err     error
		want    []int // reads served by each round
	}{
		// A minute: only the second read's arrival can start the round
		// within the test's deadline.
		{name: "starts once as many reads as last time are queued", arrive: true, spacing: time.Minute, want: []int{1, 2, 2}},
		{name: "starts after the spacing without them", spacing: time.Second, want: []int{1, 2, 1}},
		{name: "every waiter gets the round's error", arrive: true, spacing: time.Minute, err: errLost, want: []int{1, 2, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRounds(2, tc.spacing, tc.err)
			v := f.v
			errs := make(chan error, 5)
			read := func() { errs <- v.verify(context.Background()) }
			go read()
			<-f.started // round 1 serves one read
			go read()
			go read()
			waitFor(t, func() bool { return v.queued() == 2 })
			f.release <- struct{}{}
			<-f.started // round 2 serves the two that queued during round 1
			go read()
			waitFor(t, func() bool { return v.queued() == 1 })
			f.release <- struct{}{}
			// Round 3 waits for a second read: round 2 served two.
			waitFor(t, func() bool { return v.spaced.Load() == 1 })
			if tc.arrive {
				go read()
			}
			n := 4
			if tc.arrive {
				n = 5
			}
			for i := 0; i < n; i++ {
				if err := <-errs; !errors.Is(err, tc.err) {
					t.Fatalf("read: %v, want %v", err, tc.err)
				}
			}
			waitFor(t, v.idle)
			if got := f.served(); !equalInts(got, tc.want) {
				t.Errorf("reads per round = %v, want %v", got, tc.want)
			}
			if n := v.spaced.Load(); n != 1 {
				t.Errorf("rounds that waited for company = %d, want 1", n)
			}
		})
	}
}

// TestVerifyCoalescerReadsDuringARound: a read that queued while a round of
// one read ran waits for one more read before its round starts.
func TestVerifyCoalescerReadsDuringARound(t *testing.T) {
	f := newFakeRounds(1, time.Minute, nil)
	v := f.v
	errs := make(chan error, 3)
	read := func() { errs <- v.verify(context.Background()) }
	go read()
	<-f.started // round 1 serves one read
	go read()
	waitFor(t, func() bool { return v.queued() == 1 })
	f.release <- struct{}{}
	waitFor(t, func() bool { return v.spaced.Load() == 1 })
	go read() // starts round 2 well before the minute's spacing
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	waitFor(t, v.idle)
	if got, want := f.served(), []int{1, 2}; !equalInts(got, want) {
		t.Errorf("reads per round = %v, want %v", got, want)
	}
}
