package grouptransport

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

// quietDormant answers confirmations from a table of positions per group
// and records whether anything tried to open a group.
type quietDormant struct {
	mu     sync.Mutex
	at     map[uint64]QuietPosition
	asked  int
	wakes  int
	answer int
}

func (d *quietDormant) Answer(uint64, any) any { d.mu.Lock(); d.answer++; d.mu.Unlock(); return nil }
func (d *quietDormant) Wake(uint64) bool       { d.mu.Lock(); d.wakes++; d.mu.Unlock(); return false }
func (d *quietDormant) ConfirmQuiet(group uint64, p QuietPosition) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked++
	at, ok := d.at[group]
	return ok && at == p
}

func newConfirmPair(t *testing.T, d Dormant) (asker, answerer *Transport) {
	t.Helper()
	mk := func(d Dormant) *Transport {
		tr := New(Config{Listener: listen(t, "127.0.0.1:0"), Timeout: 2 * time.Second, Dormant: d})
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	return mk(nil), mk(d)
}

// A confirmation is answered from the Confirmer, never by opening the
// group, and is subject to the fault hook like raft's requests.
func TestConfirmQuiet(t *testing.T) {
	pos := QuietPosition{Term: 3, LastIndex: 17, LastTerm: 3}
	d := &quietDormant{at: map[uint64]QuietPosition{7: pos}}
	asker, answerer := newConfirmPair(t, d)
	addr := answerer.Addr().String()
	cases := []struct {
		name  string
		group uint64
		pos   QuietPosition
		want  bool
	}{
		{"same position", 7, pos, true},
		{"newer term", 7, QuietPosition{Term: 4, LastIndex: 17, LastTerm: 3}, false},
		{"other last index", 7, QuietPosition{Term: 3, LastIndex: 18, LastTerm: 3}, false},
		{"group not quiet here", 8, pos, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			yes, err := asker.ConfirmQuiet(ctx, addr, c.group, c.pos)
			if err != nil || yes != c.want {
				t.Fatalf("ConfirmQuiet = %v, %v; want %v, nil", yes, err, c.want)
			}
		})
	}
	d.mu.Lock()
	if d.asked != len(cases) || d.wakes != 0 || d.answer != 0 {
		t.Errorf("confirmer asked %d times (want %d), Wake %d, Answer %d (want 0, 0)", d.asked, len(cases), d.wakes, d.answer)
	}
	d.mu.Unlock()

	// Dropped by the fault hook: an error (the reader falls back), not a yes.
	asker.SetFault(dropAll{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if yes, err := asker.ConfirmQuiet(ctx, addr, 7, pos); yes || !errors.Is(err, ErrDropped) {
		t.Fatalf("with the fault hook dropping: %v, %v; want false, ErrDropped", yes, err)
	}
	asker.SetFault(nil)
	// Isolated answerer: no answer, an error.
	answerer.SetIsolated(true)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if yes, err := asker.ConfirmQuiet(ctx2, addr, 7, pos); yes || err == nil {
		t.Fatalf("to an isolated server: %v, %v; want false and an error", yes, err)
	}
}

type dropAll struct{}

func (dropAll) Outgoing(string) (time.Duration, bool) { return 0, true }

// A server without a Confirmer says no.
func TestConfirmQuietWithoutConfirmer(t *testing.T) {
	asker, answerer := newConfirmPair(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	yes, err := asker.ConfirmQuiet(ctx, answerer.Addr().String(), 1, QuietPosition{Term: 1, LastIndex: 1, LastTerm: 1})
	if yes || err != nil {
		t.Fatalf("ConfirmQuiet = %v, %v; want false, nil", yes, err)
	}
}

// A request of a kind the receiver does not know is answered
// ErrUnsupported and the connection stays up for everyone else's traffic;
// a server that predates the confirm lane (it closes a connection whose
// hello names a lane it does not know) makes ConfirmQuiet fail at once,
// which the reader treats as a no.
func TestUnknownKindAndOldServer(t *testing.T) {
	asker, answerer := newConfirmPair(t, &quietDormant{})
	addr := answerer.Addr().String()
	cc, err := asker.conn(addr, laneControl)
	if err != nil {
		t.Fatal(err)
	}
	b := getBuf()
	*b = endFrame(append(startFrame((*b)[:0], 0x7f, 1, 0), 1, 2, 3))
	id, c, err := cc.sendFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := cc.wait(id, c, 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := result(payload, &confirmAnswer{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unknown kind answered %v; want ErrUnsupported", err)
	}
	if cc.broken() {
		t.Fatal("the control lane was closed by a request of an unknown kind")
	}

	// The old server: reads the hello, then closes, as serve does for a
	// lane it does not know.
	ln := listen(t, "127.0.0.1:0")
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				var h [6]byte
				_, _ = io.ReadFull(conn, h[:])
				conn.Close()
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	yes, err := asker.ConfirmQuiet(ctx, ln.Addr().String(), 1, QuietPosition{Term: 1, LastIndex: 1, LastTerm: 1})
	if yes || err == nil {
		t.Fatalf("old server: %v, %v; want false and an error", yes, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("old server: the confirmation waited for its deadline (%v) instead of failing when the connection closed", time.Since(start))
	}
}
