package cluster

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// mergeAttempts bounds mergeRetrying: a merge aborts only when a replica
// of the right range has not applied the freeze after the master's wait
// (1 s, 2 s while it still applies), which a healthy follower on a loaded
// 2-core machine can miss now and then, not five times in a row.
const mergeAttempts = 5

// mergeAborted reports whether err is the master's answer that it froze
// the right range, a replica did not apply the freeze in time, and the
// merge was aborted and the range unfrozen (rpcerr.ReasonMergeAborted):
// nothing changed, and asking again is what an operator would do.
func mergeAborted(err error) bool {
	return err != nil && rpcerr.Parse(err).Reason == rpcerr.ReasonMergeAborted
}

// mergeRetrying asks the master to merge range left with its right
// neighbour, again while the answer is that the merge was aborted (at
// most mergeAttempts times); any other error is returned at once.
func mergeRetrying(ctx context.Context, t *testing.T, mc *masterclient.Client, left uint64) (*pb.MergeResponse, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var resp *pb.MergeResponse
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			resp, err = m.Merge(ctx, &pb.MergeRequest{RangeId: left})
			return err
		})
		if (!mergeAborted(err) && !rangeBusy(err)) || attempt == mergeAttempts {
			return resp, err
		}
		t.Logf("merge of range %d refused (attempt %d of %d), asking again: %v", left, attempt, mergeAttempts, err)
		busyPause(ctx, err)
	}
}

// rangeBusy reports whether err is the master's answer that another
// operation holds the range (master.ErrBusy, ErrNotReady): the master's
// own replica-set check may claim a range a test has just left in need of
// a fix (a non-voter), and an operator asked so would ask again.
func rangeBusy(err error) bool {
	info := rpcerr.Parse(err)
	return err != nil && info.Code == codes.Aborted && info.Reason == rpcerr.ReasonUnavailable
}

// busyPause waits a moment before a refused operation is asked again, so
// the operation holding the range can end.
func busyPause(ctx context.Context, err error) {
	if !rangeBusy(err) {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(200 * time.Millisecond):
	}
}

// splitRetrying asks the master to split table's range at pk, again while
// the answer is that another operation holds the range (at most
// mergeAttempts times); any other error is returned at once.
func splitRetrying(ctx context.Context, t *testing.T, mc *masterclient.Client, table, pk string) (*pb.SplitResponse, error) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var resp *pb.SplitResponse
		err := mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
			var err error
			resp, err = m.Split(ctx, &pb.SplitRequest{Table: table, PartitionKey: pk})
			return err
		})
		if !rangeBusy(err) || attempt == mergeAttempts {
			return resp, err
		}
		t.Logf("split of %s at %q refused (attempt %d of %d), asking again: %v", table, pk, attempt, mergeAttempts, err)
		busyPause(ctx, err)
	}
}
