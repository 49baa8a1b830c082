package grouptransport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// hangingDial blocks every dial to hang until the dial's context ends (a
// peer whose address swallows SYNs, or one stopped mid TLS handshake),
// telling started when one begins; other addresses are dialed normally.
func hangingDial(hang string, started chan<- struct{}) DialFunc {
	d := &net.Dialer{}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == hang {
			select {
			case started <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return d.DialContext(ctx, "tcp", addr)
	}
}

// A quiet read's confirmation waits for its context, not the transport's
// timeout, when its lane must first be dialed and the dial hangs: the
// reader then wakes the range after QuietReadTimeout (100 ms) instead of
// a 10 s raft RPC timeout. Confirmations to the same peer meanwhile do not
// queue behind the hanging dial either, and one to another peer is not
// held up at all.
func TestConfirmQuietDialHonoursContext(t *testing.T) {
	const timeout = 5 * time.Second
	answerer := New(Config{Listener: listen(t, "127.0.0.1:0"), Timeout: timeout, Dormant: &quietDormant{at: map[uint64]QuietPosition{1: {Term: 1, LastIndex: 1, LastTerm: 1}}}})
	t.Cleanup(func() { answerer.Close() })
	hung := listen(t, "127.0.0.1:0") // never dialed for real
	t.Cleanup(func() { hung.Close() })
	started := make(chan struct{}, 1)
	asker := New(Config{Listener: listen(t, "127.0.0.1:0"), Timeout: timeout, Dial: hangingDial(hung.Addr().String(), started)})
	t.Cleanup(func() { asker.Close() })

	// A first confirmation with a long deadline dials and hangs; those
	// after it, with short ones, must not wait for its dial.
	long := make(chan time.Duration, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, _ = asker.ConfirmQuiet(ctx, hung.Addr().String(), 1, QuietPosition{Term: 1, LastIndex: 1, LastTerm: 1})
		long <- time.Since(start)
	}()
	<-started

	const askers = 4
	var wg sync.WaitGroup
	took := make(chan time.Duration, askers)
	for range askers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			yes, err := asker.ConfirmQuiet(ctx, hung.Addr().String(), 1, QuietPosition{Term: 1, LastIndex: 1, LastTerm: 1})
			if yes || err == nil {
				t.Errorf("hanging peer: %v, %v; want false and an error", yes, err)
			}
			took <- time.Since(start)
		}()
	}
	// Meanwhile a confirmation to a reachable peer is answered.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if yes, err := asker.ConfirmQuiet(ctx, answerer.Addr().String(), 1, QuietPosition{Term: 1, LastIndex: 1, LastTerm: 1}); !yes || err != nil {
		t.Fatalf("reachable peer: %v, %v", yes, err)
	}
	wg.Wait()
	close(took)
	for d := range took {
		if d > time.Second {
			t.Fatalf("a confirmation with a 100 ms context took %v (another's dial hangs for its 2 s context, the transport's timeout is %v)", d, timeout)
		}
	}
	if d := <-long; d > timeout/2 {
		t.Fatalf("a confirmation with a 2 s context took %v (the transport's timeout is %v)", d, timeout)
	}
}

// A confirmation's short deadline does not cut the lane's dial: the dial
// goes on and opens the lane for the next confirmation. Cut with each
// caller, a dial slower than a quiet read's deadline never opened the lane
// and every quiet read dialled again (20 dials for 20 confirmations).
func TestConfirmQuietDialOutlivesItsCaller(t *testing.T) {
	answerer := New(Config{Listener: listen(t, "127.0.0.1:0"), Timeout: 5 * time.Second, Dormant: &quietDormant{at: map[uint64]QuietPosition{1: {Term: 1, LastIndex: 1, LastTerm: 1}}}})
	t.Cleanup(func() { answerer.Close() })
	var mu sync.Mutex
	dials := 0
	d := &net.Dialer{}
	asker := New(Config{Listener: listen(t, "127.0.0.1:0"), Timeout: 5 * time.Second, Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dials++
		mu.Unlock()
		select {
		case <-time.After(30 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return d.DialContext(ctx, "tcp", addr)
	}})
	t.Cleanup(func() { asker.Close() })
	pos := QuietPosition{Term: 1, LastIndex: 1, LastTerm: 1}
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		_, _ = asker.ConfirmQuiet(ctx, answerer.Addr().String(), 1, pos)
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if yes, err := asker.ConfirmQuiet(ctx, answerer.Addr().String(), 1, pos); !yes || err != nil {
		t.Fatalf("confirmation after the short ones: %v, %v", yes, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if dials != 1 {
		t.Fatalf("%d dials for 21 confirmations to one peer, want 1", dials)
	}
}
