package ctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// GroupResult is one GroupTables answer of ctl group-tables: what that
// call did and what is left.
type GroupResult struct {
	// Attached are the ranges the call took into an anchor group, each
	// now a span of it.
	Attached []uint64 `json:"attached_range_ids"`
	// Remaining are ranges still in a group of their own that could be
	// attached (busy, failed or aborted, no report yet, or not reached in
	// the call's time).
	Remaining []uint64 `json:"remaining_range_ids"`
	// Skipped are ranges left in a group of their own by the rules.
	Skipped []SkippedRange `json:"skipped"`
	// Done: nothing remains (skipped ranges stay where they are).
	Done bool `json:"done"`
}

// SkippedRange is a range GroupTables leaves where it is, and why.
type SkippedRange struct {
	RangeID uint64 `json:"range_id"`
	Reason  string `json:"reason"`
}

func groupResultOf(resp *pb.GroupTablesResponse) GroupResult {
	r := GroupResult{Attached: resp.GetAttachedRangeIds(), Remaining: resp.GetRemainingRangeIds(), Skipped: []SkippedRange{}}
	for _, sk := range resp.GetSkipped() {
		r.Skipped = append(r.Skipped, SkippedRange{RangeID: sk.GetRangeId(), Reason: sk.GetReason()})
	}
	r.Done = len(r.Remaining) == 0
	for _, p := range []*[]uint64{&r.Attached, &r.Remaining} {
		if *p == nil {
			*p = []uint64{}
		}
	}
	return r
}

// groupTables calls GroupTables until nothing remains or --wait passed,
// one line (or JSON object) per call, as ungroupTables does.
func (r *runner) groupTables(ctx context.Context, o *opts, _ []string) error {
	deadline := time.Now().Add(o.wait)
	budget := max(time.Second, r.cfg.Timeout/3)
	for {
		var resp *pb.GroupTablesResponse
		cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		err := leaderCall(cctx, r.mc, func(ctx context.Context, c pb.MasterServiceClient) error {
			var err error
			resp, err = c.GroupTables(ctx, &pb.GroupTablesRequest{BudgetMs: uint32(budget.Milliseconds())})
			return err
		})
		timedOut := errors.Is(cctx.Err(), context.DeadlineExceeded)
		cancel()
		if err != nil && (!timedOut || ctx.Err() != nil || !time.Now().Before(deadline)) {
			return r.masterError("group-tables", err)
		}
		if err == nil {
			res := groupResultOf(resp)
			if err := r.groupProgress(res); err != nil || res.Done {
				return err
			}
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("ctl: group-tables: ranges left after %v; run it again to go on", o.wait)
		}
	}
}

// groupProgress prints one call's answer: counts, what is left, and each
// skipped range with its reason.
func (r *runner) groupProgress(res GroupResult) error {
	if r.json != nil {
		return r.json.write(res)
	}
	var err error
	if res.Done {
		_, err = fmt.Fprintf(r.out, "%s  attached %d ranges, skipped %d: no table left to take into an anchor group\n",
			r.env.now().Format("15:04:05"), len(res.Attached), len(res.Skipped))
	} else {
		_, err = fmt.Fprintf(r.out, "%s  attached %d ranges, skipped %d; left: %d ranges %v\n",
			r.env.now().Format("15:04:05"), len(res.Attached), len(res.Skipped), len(res.Remaining), res.Remaining)
	}
	for _, sk := range res.Skipped {
		if err != nil {
			break
		}
		_, err = fmt.Fprintf(r.out, "  skipped range %d: %s\n", sk.RangeID, sk.Reason)
	}
	return err
}
