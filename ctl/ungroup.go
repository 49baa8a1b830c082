package ctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// UngroupResult is one UngroupTables answer of ctl ungroup-tables: what
// that call did and what is left.
type UngroupResult struct {
	// Detached are the ranges the call took out of an anchor group, each
	// now a Raft group of its own.
	Detached []uint64 `json:"detached_range_ids"`
	// Remaining are ranges still in an anchor group (busy, failed,
	// pending their add, or not reached in the call's time).
	Remaining []uint64 `json:"remaining_range_ids"`
	// AnchorsDeleted are the anchor tables the call deleted.
	AnchorsDeleted []string `json:"anchors_deleted"`
	// AnchorsRemaining are the anchor tables left.
	AnchorsRemaining []string `json:"anchors_remaining"`
	// Done: nothing is left; every table's range is in a group of its own
	// and no anchor remains.
	Done bool `json:"done"`
}

func ungroupResultOf(resp *pb.UngroupTablesResponse) UngroupResult {
	r := UngroupResult{
		Detached: resp.GetDetachedRangeIds(), Remaining: resp.GetRemainingRangeIds(),
		AnchorsDeleted: resp.GetAnchorsDeleted(), AnchorsRemaining: resp.GetAnchorsRemaining(),
	}
	r.Done = len(r.Remaining) == 0 && len(r.AnchorsRemaining) == 0
	for _, p := range []*[]uint64{&r.Detached, &r.Remaining} {
		if *p == nil {
			*p = []uint64{}
		}
	}
	for _, p := range []*[]string{&r.AnchorsDeleted, &r.AnchorsRemaining} {
		if *p == nil {
			*p = []string{}
		}
	}
	return r
}

// ungroupTables calls UngroupTables until nothing is left or --wait
// passed, one line (or JSON object) per call. Each call asks the master
// to start work for a third of --timeout and waits --timeout for it; a
// call that times out is repeated (the master finishes a detach under
// way, and the RPC is idempotent).
func (r *runner) ungroupTables(ctx context.Context, o *opts, _ []string) error {
	deadline := time.Now().Add(o.wait)
	budget := max(time.Second, r.cfg.Timeout/3)
	for {
		var resp *pb.UngroupTablesResponse
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		err := leaderCall(cctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) error {
			var err error
			resp, err = c.UngroupTables(ctx, &pb.UngroupTablesRequest{BudgetMs: uint32(budget.Milliseconds())})
			return err
		})
		// A call that ran out of --timeout is asked again while --wait
		// lasts; any other failure ends the command.
		timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil && (!timedOut || ctx.Err() != nil || !time.Now().Before(deadline)) {
			return r.masterError("ungroup-tables", err)
		}
		if err == nil {
			res := ungroupResultOf(resp)
			if err := r.ungroupProgress(res); err != nil || res.Done {
				return err
			}
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("ctl: ungroup-tables: ranges or anchors left after %v; run it again to go on", o.wait)
		}
	}
}

// ungroupProgress prints one call's answer.
func (r *runner) ungroupProgress(res UngroupResult) error {
	if r.json != nil {
		return r.json.write(res)
	}
	if res.Done {
		_, err := fmt.Fprintf(r.out, "%s  detached %d ranges, deleted anchors %v: every table's range is in a Raft group of its own, no anchor left\n",
			r.env.now().Format("15:04:05"), len(res.Detached), res.AnchorsDeleted)
		return err
	}
	_, err := fmt.Fprintf(r.out, "%s  detached %d ranges, deleted anchors %v; left: %d ranges %v, anchors %v\n",
		r.env.now().Format("15:04:05"), len(res.Detached), res.AnchorsDeleted, len(res.Remaining), res.Remaining, res.AnchorsRemaining)
	return err
}
