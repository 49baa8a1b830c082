package grouptransport

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// An InstallSnapshot belongs on a snapshot connection, its data streamed
// after it. One arriving on a long-lived lane has no data: delivered, raft
// would read the snapshot from a nil Reader and panic (installSnapshot
// drains rpc.Reader even when it refuses), taking the whole server down.
// It is answered with an error and never reaches the group, open or quiet.
func TestSnapshotOnStreamLaneRefused(t *testing.T) {
	for _, lane := range []byte{laneControl, laneAppend} {
		for _, open := range []bool{true, false} {
			d := &quietDormant{}
			asker, answerer := newConfirmPair(t, d)
			delivered := make(chan raft.RPC, 1)
			if open {
				g, err := answerer.Group(7, nil)
				if err != nil {
					t.Fatal(err)
				}
				go func() {
					for rpc := range g.Consumer() {
						delivered <- rpc
						rpc.Respond(&raft.InstallSnapshotResponse{}, nil)
					}
				}()
			}
			cc, err := asker.conn(answerer.Addr().String(), lane)
			if err != nil {
				t.Fatal(err)
			}
			id, c, err := cc.send(7, &raft.InstallSnapshotRequest{RPCHeader: hdr(), SnapshotVersion: 1, Term: 3, LastLogIndex: 9, LastLogTerm: 3, Size: 10})
			if err != nil {
				t.Fatal(err)
			}
			payload, err := cc.wait(id, c, 5*time.Second, nil)
			if err != nil {
				t.Fatalf("lane %d open %v: no answer: %v", lane, open, err)
			}
			if err := result(payload, &raft.InstallSnapshotResponse{}); err == nil {
				t.Fatalf("lane %d open %v: a snapshot without its data was answered with success", lane, open)
			}
			select {
			case rpc := <-delivered:
				t.Fatalf("lane %d open %v: delivered to raft with Reader %v", lane, open, rpc.Reader)
			default:
			}
			d.mu.Lock()
			wakes := d.wakes
			d.mu.Unlock()
			if wakes != 0 {
				t.Fatalf("lane %d open %v: the snapshot tried to open a quiet group", lane, open)
			}
			if cc.broken() {
				t.Fatalf("lane %d open %v: the lane was closed (every group's traffic on it fails)", lane, open)
			}
		}
	}
}

// allocated reports the bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A frame header's length is the sender's claim: readFrame allocates as
// the bytes arrive, not the claimed length up front, so a corrupt or
// hostile header (up to maxFrameSize, 1 GiB) followed by a few bytes costs
// a few bytes, not a gigabyte per connection.
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	cases := []struct {
		name    string
		claimed uint32
		sent    int
		ok      bool
	}{
		{"huge claim, little data", maxFrameSize, 100, false},
		{"large claim, 3 MiB of data", 64 << 20, 3 << 20, false},
		{"honest large frame", 5 << 20, 5<<20 - (frameHeader - 4), true},
		{"honest small frame", 200, 200 - (frameHeader - 4), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var in bytes.Buffer
			in.Write(binary.BigEndian.AppendUint32(nil, c.claimed))
			in.WriteByte(kindAppendEntries)
			in.Write(make([]byte, 16))
			in.Write(bytes.Repeat([]byte{7}, c.sent))
			var f frame
			var err error
			var hdr [frameHeader]byte
			n := allocated(func() { f, err = readFrame(&in, &hdr) })
			if (err == nil) != c.ok {
				t.Fatalf("err = %v, want ok %v", err, c.ok)
			}
			if c.ok && (len(f.payload) != c.sent || f.payload[len(f.payload)-1] != 7) {
				t.Fatalf("payload of %d bytes, want %d", len(f.payload), c.sent)
			}
			// Slack beyond the first 1 MiB buffer: TotalAlloc is the
			// process's, and other goroutines allocate meanwhile.
			if limit := uint64(3*c.sent) + 1<<20 + 256<<10; n > limit {
				t.Fatalf("allocated %d bytes for %d arrived (claimed %d); want at most %d", n, c.sent, c.claimed, limit)
			}
		})
	}
}

// An AppendEntries whose entry count is not backed by its bytes is refused
// without a log struct allocated per claimed entry: each entry takes at
// least minLogSize bytes.
func TestDecodeEntryCountBoundedByPayload(t *testing.T) {
	head := enc(nil).header(hdr()).u(5).bytes([]byte("l")).u(1).u(1).u(1)
	cases := []struct {
		name    string
		payload []byte
	}{
		{"count of the payload's length, garbage after", append(enc(append([]byte(nil), head...)).u(1<<20), bytes.Repeat([]byte{0xff}, 1<<20)...)},
		{"count the bytes can hold, first entry corrupt", append(enc(append([]byte(nil), head...)).u(1<<20/minLogSize), bytes.Repeat([]byte{0xff}, 1<<20)...)},
		{"count above what the bytes can hold", append(enc(append([]byte(nil), head...)).u(1<<20/minLogSize+1), make([]byte, 1<<20)...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = decodeRequest(kindAppendEntries, c.payload) })
			if err == nil {
				t.Fatal("decoded")
			}
			if limit := uint64(2 * len(c.payload)); n > limit {
				t.Fatalf("allocated %d bytes decoding %d; want at most %d", n, len(c.payload), limit)
			}
		})
	}
	// As many minimal entries as the bytes hold still decode.
	var ok enc = append([]byte(nil), head...)
	ok = ok.u(1000)
	for i := range 1000 {
		_ = i
		ok = encodeLog(ok, &raft.Log{Index: 1})
	}
	if len(ok) != len(head)+2+1000*minLogSize {
		t.Fatalf("minimal entries of %d bytes, want %d", (len(ok)-len(head)-2)/1000, minLogSize)
	}
	msg, err := decodeRequest(kindAppendEntries, ok)
	if err != nil || len(msg.(*raft.AppendEntriesRequest).Entries) != 1000 {
		t.Fatalf("1000 minimal entries: %v", err)
	}
}

// A snapshot sender that stalls mid-stream (cut off without a reset,
// stopped) is given up by the receiver after the transport's timeout
// without progress, not held until TCP keepalive ends it: the group's raft
// reads the stream inside its snapshot install, and waits with it.
func TestStalledSnapshotSenderGivenUp(t *testing.T) {
	sender := New(Config{Listener: listen(t, "127.0.0.1:0"), Timeout: 5 * time.Second})
	t.Cleanup(func() { sender.Close() })
	receiver := New(Config{Listener: listen(t, "127.0.0.1:0"), Timeout: 300 * time.Millisecond})
	t.Cleanup(func() { receiver.Close() })
	g, err := receiver.Group(7, nil)
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		for rpc := range g.Consumer() {
			_, err := io.Copy(io.Discard, rpc.Reader)
			readErr <- err
			rpc.Respond(&raft.InstallSnapshotResponse{}, err)
		}
	}()
	conn, err := sender.connect(context.Background(), receiver.Addr().String(), laneSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &raft.InstallSnapshotRequest{RPCHeader: hdr(), SnapshotVersion: 1, Term: 3, LastLogIndex: 9, LastLogTerm: 3, Size: 1 << 20}
	e, kind, err := encodeRequest(startFrame(nil, 0, 7, 1), req)
	if err != nil {
		t.Fatal(err)
	}
	b := endFrame(e)
	b[4] = kind
	if _, err := conn.Write(append(b, make([]byte, 100)...)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the stalled stream read to its end")
		}
		t.Logf("given up after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("the receiver still waits for a sender stalled 5 s (its timeout is 300 ms)")
	}
}
