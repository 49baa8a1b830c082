package partitionserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/failpoint"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Tests of AttachSpan (docs/range-groups.md, stage 8): a table's range
// alone in a Raft group of its own, on the same three servers as group 5,
// frozen and taken into group 5 as a span, its rows where they are.

// ownGroupRange is range id of table tableID, whole, a Raft group of its
// own on a, b and c.
func ownGroupRange(id, tableID uint64) *pb.RangeDescriptor {
	return &pb.RangeDescriptor{RangeId: id, Table: fmt.Sprintf("t%d", tableID), TableId: tableID, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "c"}}}
}

// groupLeader waits for a leader of group id among tr's servers and
// returns its server's service.
func (tr *trio) groupLeader(id uint64) *service {
	tr.t.Helper()
	var v *service
	eventually(tr.t, fmt.Sprintf("group %d elects a leader", id), func() bool {
		var woke *Server
		for _, s := range tr.servers {
			if s == nil {
				continue
			}
			if sl := s.groupSlot(id); sl != nil {
				if m := sl.open(); m != nil && m.isLeader() {
					v = &service{s: s}
					return true
				}
				woke = s
			}
		}
		if woke != nil {
			// Quiet (quiescence on): a request opens it, as a client's
			// would.
			_, _ = woke.acquire(id)
		}
		return false
	})
	return v
}

// ownGroup creates range id (table tableID) as a group of its own on the
// trio, writes pks to it and freezes it once every replica applied the
// writes; it returns the freeze's answer once every replica applied it.
func (tr *trio) ownGroup(id, tableID uint64, pks ...string) *pb.FreezeRangeResponse {
	t := tr.t
	t.Helper()
	for _, sid := range trioIDs {
		if err := tr.servers[sid].createReplica(ownGroupRange(id, tableID), true, sid == "a", tr.addrs, joinFloor{}); err != nil {
			t.Fatal(err)
		}
	}
	v := tr.groupLeader(id)
	for _, pk := range pks {
		write(t, v, id, 1, pk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fr *pb.FreezeRangeResponse
	eventually(t, fmt.Sprintf("range %d freezes", id), func() bool {
		var err error
		fr, err = tr.groupLeader(id).FreezeRange(ctx, &pb.FreezeRangeRequest{RangeId: id})
		return err == nil
	})
	// The master records the decision once every replica applied the
	// freeze.
	for _, s := range tr.servers {
		eventually(t, fmt.Sprintf("%s applies range %d's freeze", s.id, id), func() bool {
			sl := s.groupSlot(id)
			sp := sl.span(id)
			if sp == nil {
				return false
			}
			sum := sp.Summary()
			return sum.Frozen && sum.FrozenIndex == fr.GetFreezeIndex()
		})
	}
	return fr
}

// ownGroupGone reports whether range id's own group has ended on s: no
// slot, no group in the shared log, no directory.
func ownGroupGone(s *Server, id uint64) bool {
	return s.groupSlot(id) == nil && !slices.Contains(s.logs.Groups(), id) && !exists(replicaDir(s.cfg.DataDir, id))
}

// TestAttachSpan: range 30 (table 8), a group of its own, written and
// frozen, is attached to group 5 on its leader. Its rows read back and new
// writes go through group 5 on every server; its own group ends on all
// three (open there, or quiet); a repeat answers the span; a server
// restarted serves it through group 5 and opens no group for it.
func TestAttachSpan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		quiesce time.Duration
	}{
		{"open", 0},
		{"quiet", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTrioWith(t, func(c *Config) { c.QuiesceAfter = tc.quiesce })
			v := tr.groupLeader(5)
			write(t, v, 5, 1, "g")
			fr := tr.ownGroup(30, 8, "p", "q")
			if tc.quiesce > 0 {
				for _, s := range tr.servers {
					eventually(t, fmt.Sprintf("range 30 quiet on %s", s.id), func() bool { return s.ReplicaState(30) == "quiet" })
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req := &pb.AttachSpanRequest{GroupRangeId: 5, Right: fr.GetRange(), RightFreezeIndex: fr.GetFreezeIndex()}
			var resp *pb.AttachSpanResponse
			eventually(t, "the attach", func() bool {
				var err error
				resp, err = tr.groupLeader(5).AttachSpan(ctx, req)
				if status.Code(err) != codes.Unavailable && err != nil {
					t.Fatalf("attach: %v", err)
				}
				return err == nil
			})
			v = tr.groupLeader(5)
			d := resp.GetRange()
			if d.GetRangeId() != 30 || d.GetGroupId() != 5 || d.GetGeneration() != 2 || d.GetTableId() != 8 || len(d.GetReplicas()) != 3 {
				t.Fatalf("attached: %v", d)
			}
			// Read back and written through group 5.
			for _, pk := range []string{"p", "q"} {
				if _, err := v.Get(ctx, &pb.GetRequest{RangeId: 30, PartitionKey: pk, RowKey: "r"}); err != nil {
					t.Fatalf("read of %s from the attached range: %v", pk, err)
				}
			}
			before := v.s.groupSlot(5).open().raft.LastIndex()
			write(t, v, 30, 2, "s")
			if n := commandsAfter(t, v.s.groupSlot(5).open(), before); n < 1 {
				t.Fatalf("the write took %d entries of group 5's log", n)
			}
			for _, s := range tr.servers {
				eventually(t, fmt.Sprintf("%s serves range 30 through group 5, its own group ended", s.id), func() bool {
					return holds(s, 30, "p", "q", "s") && ownGroupGone(s, 30)
				})
			}
			// A repeat (the answer lost) answers the span.
			if again, err := v.AttachSpan(ctx, req); err != nil || again.GetRange().GetGroupId() != 5 || again.GetRange().GetGeneration() != 2 {
				t.Fatalf("repeat: %v, %v", again, err)
			}
			// A restart serves it through group 5 and opens no group for
			// it; the group is led again and writes go on.
			for _, id := range trioIDs {
				if tr.servers[id] == v.s {
					continue
				}
				s := tr.restart(id, tr.stop(id))
				if s.groupSlot(30) != nil || slices.Contains(s.logs.Groups(), 30) {
					t.Fatalf("%s opened a group for range 30 at its start", id)
				}
				eventually(t, fmt.Sprintf("%s serves range 30 after a restart", id), func() bool { return holds(s, 30, "p", "q", "s") })
				break
			}
			write(t, tr.groupLeader(5), 30, 2, "u")
		})
	}
}

// TestAttachSpanFailpointsAndCrash: an answer lost after the apply
// (partitionserver/attach-span/after-apply) leaves the span attached, and
// a retry answers it; a crash before a server stopped the range's own
// group leaves its log and directory, which the next start removes,
// serving the range through the group. Refusals propose nothing.
func TestAttachSpanFailpointsAndCrash(t *testing.T) {
	tr := newTrio(t)
	fr := tr.ownGroup(31, 9, "p")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := tr.groupLeader(5)

	// Refused before anything is proposed: no right range; a freeze that
	// lists no replica on one of group 5's members (c); a freeze index the
	// range is not frozen at; the group itself.
	notColocated := &pb.RangeDescriptor{RangeId: 31, Table: fr.GetRange().GetTable(), TableId: 9, Generation: 1,
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}}}
	for _, c := range []struct {
		name string
		req  *pb.AttachSpanRequest
		want codes.Code
	}{
		{"no right", &pb.AttachSpanRequest{GroupRangeId: 5}, codes.InvalidArgument},
		{"not colocated", &pb.AttachSpanRequest{GroupRangeId: 5, Right: notColocated, RightFreezeIndex: fr.GetFreezeIndex()}, codes.FailedPrecondition},
		{"another freeze", &pb.AttachSpanRequest{GroupRangeId: 5, Right: fr.GetRange(), RightFreezeIndex: fr.GetFreezeIndex() - 1}, codes.FailedPrecondition},
		{"the group itself", &pb.AttachSpanRequest{GroupRangeId: 5, Right: ownGroupRange(5, 7), RightFreezeIndex: 3}, codes.InvalidArgument},
	} {
		last := v.s.groupSlot(5).open().raft.LastIndex()
		if _, err := v.AttachSpan(ctx, c.req); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if n := commandsAfter(t, v.s.groupSlot(5).open(), last); n != 0 {
			t.Errorf("%s: %d entries proposed", c.name, n)
		}
	}
	if !rpcerr.Is(func() error {
		_, err := v.AttachSpan(ctx, &pb.AttachSpanRequest{GroupRangeId: 5, Right: fr.GetRange(), RightFreezeIndex: fr.GetFreezeIndex() + 7})
		return err
	}(), rpcerr.ReasonNotReady) {
		t.Error("a freeze the right range is not at is not refused NOT_READY")
	}

	// Every server keeps range 31's own group (the crash before the
	// hook's work), and the answer is lost after the apply.
	failpoint.Enable("partitionserver/attach-span/keep-own-group", func() error { return errors.New("crash before stopping the group") })
	failpoint.Enable("partitionserver/attach-span/after-apply", func() error { return errors.New("crash after apply") })
	_, err := v.AttachSpan(ctx, &pb.AttachSpanRequest{GroupRangeId: 5, Right: fr.GetRange(), RightFreezeIndex: fr.GetFreezeIndex()})
	failpoint.Disable("partitionserver/attach-span/after-apply")
	if err == nil {
		t.Fatal("after-apply: answered")
	}
	resp, err := v.AttachSpan(ctx, &pb.AttachSpanRequest{GroupRangeId: 5, Right: fr.GetRange(), RightFreezeIndex: fr.GetFreezeIndex()})
	if err != nil || resp.GetRange().GetGroupId() != 5 {
		t.Fatalf("retry after the lost answer: %v, %v", resp, err)
	}
	var other string
	for _, id := range trioIDs {
		if tr.servers[id] != v.s {
			other = id
		}
	}
	s := tr.servers[other]
	eventually(t, "the follower applies the attach", func() bool { return holds(s, 31, "p") })
	// The follower's replica of range 31's group, kept: its log is still
	// there when it crashes.
	if !slices.Contains(s.logs.Groups(), 31) || s.groupSlot(31) == nil {
		t.Fatalf("%s: range 31's own group already stopped (failpoint not in force)", other)
	}
	cfg := tr.stop(other)
	failpoint.Disable("partitionserver/attach-span/keep-own-group")
	s = tr.restart(other, cfg)
	if !ownGroupGone(s, 31) {
		t.Fatalf("%s: range 31's own group left at the start: slot %v, log groups %v", other, s.groupSlot(31) != nil, s.logs.Groups())
	}
	eventually(t, "the restarted server serves range 31 through group 5", func() bool { return holds(s, 31, "p") })
	write(t, tr.groupLeader(5), 31, 2, "q")
	eventually(t, "the restarted server applies a write to range 31", func() bool { return holds(s, 31, "p", "q") })
}

// attachSpansMaster records whether a heartbeat announced attach_spans.
type attachSpansMaster struct {
	pb.UnimplementedMasterServiceServer
	said atomic.Bool
}

func (m *attachSpansMaster) Heartbeat(_ context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	if req.GetAttachSpans() {
		m.said.Store(true)
	}
	return &pb.HeartbeatResponse{}, nil
}

// TestHeartbeatAnnouncesAttachSpans: the server tells the master it
// applies ATTACH_SPAN and serves AttachSpan (HeartbeatRequest.attach_spans):
// the master attaches a range only when every server of both groups says
// so.
func TestHeartbeatAnnouncesAttachSpans(t *testing.T) {
	m := &attachSpansMaster{}
	started(t, newAgainstMaster(t, m, nil))
	eventually(t, "a heartbeat says attach_spans", m.said.Load)
}
