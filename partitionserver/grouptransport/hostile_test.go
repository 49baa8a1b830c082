package grouptransport

import (
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
