package partitionserver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Tests of deleting one table of a Raft group that several tables share
// (docs/range-groups.md, stage 7, step 5).

// groupOfRange is the group that serves range id on s, 0 if none.
func groupOfRange(s *Server, id uint64) uint64 {
	if sl := s.slotOf(id); sl != nil {
		return sl.id
	}
	return 0
}

// servesRows reports whether s serves range id in group g with rows pks.
func servesRows(s *Server, id, g uint64, pks ...string) bool {
	sl := s.slotOf(id)
	if sl == nil || sl.id != g {
		return false
	}
	sp := sl.span(id)
	if sp == nil {
		return false
	}
	for _, pk := range pks {
		if _, err := sp.Get(pk, "r"); err != nil {
			return false
		}
	}
	return true
}

// gone reports whether s neither hosts nor stores range id.
func gone(s *Server, id uint64) bool {
	ok, err := s.store.HasRange(id)
	return !ok && err == nil && !s.hosts(id) && s.groupSlot(id) == nil
}

// dropTables is a heartbeat answer's catalog: live the live tables, every
// table id below 20 known.
func dropTables(tr *trio, live ...uint64) *reportState {
	rp := &reportState{raftAddrs: tr.addrs, live: map[uint64]bool{}, nextTableID: 20}
	for _, id := range live {
		rp.live[id] = true
	}
	return rp
}

// reconcileAll runs a reconcile pass on every server and reports whether
// done holds on each after.
func (tr *trio) reconcileAll(rp *reportState, done func(*Server) bool) bool {
	all := true
	for _, id := range trioIDs {
		s := tr.servers[id]
		s.reconcile(rp, nil)
		all = done(s) && all
	}
	return all
}

func (tr *trio) leaderID(v *service) string {
	for id, s := range tr.servers {
		if s == v.s {
			return id
		}
	}
	return ""
}

// TestDroppedSpanOfSharedGroup: group 5 serves table 7's namesake range 5
// and the added spans 20 (table 8) and 21 (table 9) on three servers.
//   - Table 8 dropped: no server deletes group 5 (table 7's and table 9's
//     rows stay); a follower's pass proposes nothing; the leader's pass
//     detaches span 20, and the next passes delete group 20 whole.
//   - Table 7, the namesake's, dropped: the leader detaches the live span
//     21 instead (a namesake never leaves its group), then group 5 goes
//     whole and range 21 serves its rows in a group of its own.
//   - Every span of group 21 dropped (a span of table 10 added to it):
//     the first pass deletes the group whole, as before.
//
// Without the change the first pass deleted group 5 whole, table 7's and
// table 9's rows with it.
func TestDroppedSpanOfSharedGroup(t *testing.T) {
	tr := newTrio(t)
	v, _ := tr.leader()
	write(t, v, 5, 1, "p")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range []uint64{20, 21} {
		if _, err := v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 5, Range: newTableRange(id, id-12), Floor: id}); err != nil {
			t.Fatal(err)
		}
		write(t, v, id, 2, "q")
	}
	for _, s := range tr.servers {
		eventually(t, s.id+" holds the three spans", func() bool {
			return servesRows(s, 5, 5, "p") && servesRows(s, 20, 5, "q") && servesRows(s, 21, 5, "q")
		})
	}

	// Table 8 dropped. The followers first: refused, and no detach.
	rp := dropTables(tr, 7, 9)
	leader := tr.leaderID(v)
	for _, id := range trioIDs {
		if id == leader {
			continue
		}
		s := tr.servers[id]
		if !s.reconcile(rp, nil) {
			t.Errorf("%s: the pass left no work for a dropped span", id)
		}
		if _, busy := s.detaching.Load(uint64(5)); busy || groupOfRange(s, 20) != 5 || groupOfRange(s, 5) != 5 {
			t.Fatalf("%s, a follower: detaching %v; range 20 in group %d, range 5 in %d", id, busy, groupOfRange(s, 20), groupOfRange(s, 5))
		}
	}
	eventually(t, "table 8's span detached from group 5, then deleted", func() bool {
		return tr.reconcileAll(rp, func(s *Server) bool { return gone(s, 20) })
	})
	for _, s := range tr.servers {
		if !servesRows(s, 5, 5, "p") || !servesRows(s, 21, 5, "q") {
			t.Fatalf("%s: tables 7 and 9 after table 8's delete: range 5 in group %d, range 21 in %d", s.id, groupOfRange(s, 5), groupOfRange(s, 21))
		}
	}
	v, _ = tr.leader()
	write(t, v, 5, 1, "p2")
	write(t, v, 21, 2, "q2")

	// Table 7 dropped: its range names the group, so table 9's span
	// leaves instead, and group 5 goes whole.
	rp = dropTables(tr, 9)
	eventually(t, "table 9's span out of group 5, group 5 deleted", func() bool {
		return tr.reconcileAll(rp, func(s *Server) bool { return gone(s, 5) && servesRows(s, 21, 21, "q", "q2") })
	})

	// Every span of a group dropped: deleted whole at the first pass.
	var v21 *service
	eventually(t, "group 21 elects a leader", func() bool {
		for _, s := range tr.servers {
			if sl := s.groupSlot(21); sl != nil {
				if m := sl.open(); m != nil && m.isLeader() {
					v21 = &service{s: s}
					return true
				}
			}
		}
		return false
	})
	d10 := &pb.RangeDescriptor{RangeId: 22, GroupId: 21, Table: "t10", TableId: 10, Generation: 1, Replicas: newTableRange(22, 10).GetReplicas()}
	if _, err := v21.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 21, Range: d10, Floor: 22}); err != nil {
		t.Fatal(err)
	}
	for _, s := range tr.servers {
		eventually(t, s.id+" holds span 22 in group 21", func() bool { return groupOfRange(s, 22) == 21 })
	}
	rp = dropTables(tr)
	for _, s := range tr.servers {
		s.reconcile(rp, nil)
		if !gone(s, 21) || !gone(s, 22) {
			t.Errorf("%s: group 21, every span dropped, not deleted whole at once: 21 in %d, 22 in %d", s.id, groupOfRange(s, 21), groupOfRange(s, 22))
		}
	}
}

// TestFreezeDeletedSharedSpan: a deleted table's freeze of a range whose
// group serves another table's span is refused (NOT_READY, the group in
// MetaSharedGroup), whichever span of the two is named; once the other
// table's span left the group, a group of one table's spans (split in
// the group) freezes as before, and so does the detached span. Without
// the change the refused freezes froze the spans in the shared group.
func TestFreezeDeletedSharedSpan(t *testing.T) {
	m := &heartbeatMaster{}
	s := started(t, newAgainstMaster(t, m, nil))
	_, v := leadingRangeWithWrites(t, s, 21, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := v.AddSpan(ctx, &pb.AddSpanRequest{GroupRangeId: 21, Range: &pb.RangeDescriptor{RangeId: 30, GroupId: 21, TableId: 8, Table: "t8"}, Floor: 30}); err != nil {
		t.Fatal(err)
	}
	splitInGroup(t, v, 21, "m", 22)
	for _, id := range []uint64{30, 21, 22} {
		var err error
		eventually(t, fmt.Sprintf("range %d's freeze answered by its group's leader", id), func() bool {
			_, err = v.FreezeRange(ctx, &pb.FreezeRangeRequest{RangeId: id, TableDeleted: true})
			return codes.Unavailable != status.Code(err) // an election under a loaded machine
		})
		info := rpcerr.Parse(err)
		if info.Code != codes.FailedPrecondition || info.Reason != rpcerr.ReasonNotReady || info.Metadata[rpcerr.MetaSharedGroup] != strconv.FormatUint(21, 10) || !strings.Contains(info.Message, "shares Raft group 21") {
			t.Errorf("freeze of range %d of a shared group: %v", id, err)
		}
		sl := s.slotOf(id)
		if sl == nil || sl.span(id) == nil {
			t.Fatalf("range %d not served here", id)
		}
		if st := sl.span(id).State(); st.GetFrozen() {
			t.Errorf("range %d frozen by a refused freeze", id)
		}
	}
	if _, err := v.DetachRange(ctx, &pb.DetachRangeRequest{RangeId: 30}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{21, 22, 30} {
		var err error
		eventually(t, fmt.Sprintf("range %d, its group one table's, frozen", id), func() bool {
			_, err = v.FreezeRange(ctx, &pb.FreezeRangeRequest{RangeId: id, TableDeleted: true})
			return codes.Unavailable != status.Code(err) // the detached group electing
		})
		if err != nil || !s.slotOf(id).span(id).State().GetTableDeleted() {
			t.Errorf("freeze of range %d, its group one table's: %v", id, err)
		}
	}
}

// TestLeavingGroup: which spans leave a group serving a dropped table's
// span beside live ones.
func TestLeavingGroup(t *testing.T) {
	dropped := func(table uint64) bool { return table == 8 || table == 9 }
	for _, tc := range []struct {
		name  string
		spans []spanOf
		want  []uint64
	}{
		{"one table live", []spanOf{{id: 5, table: 7}, {id: 6, table: 7}}, nil},
		{"every span dropped", []spanOf{{id: 5, table: 8}, {id: 6, table: 9}}, nil},
		{"a dropped span leaves", []spanOf{{id: 5, table: 7}, {id: 20, table: 8}, {id: 21, table: 6}}, []uint64{20}},
		{"dropped spans of two tables leave", []spanOf{{id: 5, table: 7}, {id: 20, table: 8}, {id: 21, table: 9}}, []uint64{20, 21}},
		{"a dropped namesake stays, the live spans leave", []spanOf{{id: 5, table: 8}, {id: 20, table: 7}, {id: 21, table: 9}, {id: 22, table: 6}}, []uint64{20, 22}},
		{"a frozen dropped span cannot leave", []spanOf{{id: 5, table: 7}, {id: 20, table: 8, frozen: true}}, nil},
		{"the namesake merged away", []spanOf{{id: 20, table: 8}, {id: 21, table: 7}}, []uint64{20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leavingGroup(5, tc.spans, dropped); !slices.Equal(got, tc.want) {
				t.Errorf("leaving %v, want %v", got, tc.want)
			}
		})
	}
}
