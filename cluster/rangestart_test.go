package cluster_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/cluster/clustertest"
	"tablestore/internal/failpoint"
	"tablestore/master"
	pb "tablestore/proto/tablestorepb"
)

// TestCreateTableMarksRangeStarted: a CreateTable that answers success
// with the new range's leader has recorded the range started (no server
// may bootstrap it again: reliability.md, "A floor for generation-1
// re-creations"). When the record fails (the mark) or the answer is lost
// (after the commit), the attempt answers Unavailable and the client's
// retry, answered from the request record, records the start before it
// answers.
func TestCreateTableMarksRangeStarted(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	// One Raft group per table: the mark is a new group's start; a span
	// of an anchor group is started by its ADD_SPAN, whose crash points
	// TestTableGroupCreateInterrupted covers.
	c := clustertest.StartTuned(t, 3, func(m *master.Config) { m.TableGroups = false }, nil)
	conn, _ := clustertest.MasterClient(t, c).Conn()
	cl := pb.NewMasterServiceClient(conn)
	ctx := clustertest.Context(t, 2*time.Minute)
	cases := []struct {
		table, point string // point: a failpoint failing the first attempt once
	}{
		{"answered", ""},
		{"markfails", "master/range-start/mark"},
		{"answerlost", "master/create-table/after-commit"},
	}
	for _, tc := range cases {
		req := &pb.CreateTableRequest{Name: tc.table, RequestId: []byte("req-" + tc.table)}
		if tc.point != "" {
			failpoint.Enable(tc.point, failOnce())
			_, err := cl.CreateTable(ctx, req)
			failpoint.Disable(tc.point)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("%s: first attempt: %v, want Unavailable", tc.table, err)
			}
		}
		resp, err := cl.CreateTable(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", tc.table, err)
		}
		id := resp.GetRanges()[0].GetRangeId()
		if resp.GetLeader() == "" {
			t.Fatalf("%s: range %d answered without a leader", tc.table, id)
		}
		if got := c.Masters[0].Server.UnstartedRanges(); slices.Contains(got, id) {
			t.Fatalf("%s: answered with leader %s, but range %d is not marked started (unstarted %v)", tc.table, resp.GetLeader(), id, got)
		}
	}
}

// failOnce returns a failpoint action that fails its first run only.
func failOnce() func() error {
	var n atomic.Int32
	return func() error {
		if n.Add(1) == 1 {
			return failpoint.ErrInjected
		}
		return nil
	}
}
