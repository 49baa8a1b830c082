package clustertest

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// SplitRange asks the master to split table's range at pk.
func SplitRange(t testing.TB, ctx context.Context, mc *masterclient.Client, table, pk string) *pb.SplitResponse {
	t.Helper()
	var split *pb.SplitResponse
	if err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		split, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: pk})
		return err
	}); err != nil {
		t.Fatalf("split %s at %q: %v", table, pk, err)
	}
	return split
}

// MergeDone asks the master to merge range left with its right neighbour
// and reports whether the table is one range afterwards. A merge whose
// answer was lost (the master client's attempt timed out while it ran)
// leaves no neighbour to merge: that is done too.
func MergeDone(ctx context.Context, t testing.TB, mc *masterclient.Client, table string, left uint64) bool {
	err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		_, err := m.Merge(ctx, &pb.MergeRequest{RangeId: left})
		return err
	})
	return err == nil || len(TableRanges(PartitionMap(t, mc), table)) == 1
}

// MergeAttempts bounds MergeRetrying: a merge aborts only when a replica
// of the right range has not applied the freeze after the master's wait
// (1 s, 2 s while it still applies), which a healthy follower on a loaded
// 2-core machine can miss now and then, not five times in a row.
const MergeAttempts = 5

// MergeAborted reports whether err is the master's answer that it froze
// the right range, a replica did not apply the freeze in time, and the
// merge was aborted and the range unfrozen (rpcerr.ReasonMergeAborted):
// nothing changed, and asking again is what an operator would do.
func MergeAborted(err error) bool {
	return err != nil && rpcerr.Parse(err).Reason == rpcerr.ReasonMergeAborted
}

// MergeRetrying asks the master to merge range left with its right
// neighbour, again while the answer is that the merge was aborted (at
// most MergeAttempts times); any other error is returned at once.
func MergeRetrying(ctx context.Context, t testing.TB, mc *masterclient.Client, left uint64) (*pb.MergeResponse, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var resp *pb.MergeResponse
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			resp, err = m.Merge(ctx, &pb.MergeRequest{RangeId: left})
			return err
		})
		if (!MergeAborted(err) && !RangeBusy(err)) || attempt == MergeAttempts {
			return resp, err
		}
		t.Logf("merge of range %d refused (attempt %d of %d), asking again: %v", left, attempt, MergeAttempts, err)
		BusyPause(ctx, err)
	}
}

// RangeBusy reports whether err is the master's answer that another
// operation holds the range (master.ErrBusy, ErrNotReady): the master's
// own replica-set check may claim a range a test has just left in need of
// a fix (a non-voter), and an operator asked so would ask again.
func RangeBusy(err error) bool {
	info := rpcerr.Parse(err)
	return err != nil && info.Code == codes.Aborted && info.Reason == rpcerr.ReasonUnavailable
}

// BusyPause waits a moment before a refused operation is asked again, so
// the operation holding the range can end.
func BusyPause(ctx context.Context, err error) {
	if !RangeBusy(err) {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(200 * time.Millisecond):
	}
}

// SplitRetrying asks the master to split table's range at pk, again while
// the answer is that another operation holds the range (at most
// MergeAttempts times); any other error is returned at once.
func SplitRetrying(ctx context.Context, t testing.TB, mc *masterclient.Client, table, pk string) (*pb.SplitResponse, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var resp *pb.SplitResponse
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			resp, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: pk})
			return err
		})
		if !RangeBusy(err) || attempt == MergeAttempts {
			return resp, err
		}
		t.Logf("split of %s at %q refused (attempt %d of %d), asking again: %v", table, pk, attempt, MergeAttempts, err)
		BusyPause(ctx, err)
	}
}

// DropTo is a Raft fault hook that drops every request to one address: a
// one-way cut (the peer's own requests still arrive and are answered).
type DropTo struct{ Addr string }

// Outgoing drops the requests to d.Addr.
func (d DropTo) Outgoing(peer string) (time.Duration, bool) { return 0, peer == d.Addr }

// DropAll is a Raft fault hook that drops every request a server sends.
type DropAll struct{}

// Outgoing drops every request.
func (DropAll) Outgoing(string) (time.Duration, bool) { return 0, true }
