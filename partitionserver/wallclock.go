package partitionserver

import (
	"time"

	"tablestore/internal/failpoint"
)

// ClockOffsetPoint is the failpoint that shifts this server's wall clock
// at run time by the duration it is armed with (chaos's clock fault:
// `PUT /partitionserver/clock/offset` with body `offset:90s` on the
// process's $TABLESTORE_FAILPOINTS_ADDR, DELETE to heal; or
// $TABLESTORE_FAILPOINTS at start). Tests only: unarmed, it costs one
// atomic load per read.
const ClockOffsetPoint = "partitionserver/clock/offset"

// wallNow is the server's one wall clock: what its heartbeats report to
// the master and what its leaders stamp write proposals with, so a
// shifted clock is seen by the master's clock rule and moves the ranges'
// log clocks (Timestamps, the request records' prune) as a host clock
// that is off would. Config.ClockNow replaces it in tests; otherwise
// time.Now shifted by ClockOffsetPoint.
//
// Only those two read it: timers, Raft, leases, quiet reads, the clock
// guard's verdict age and every other duration keep time.Now's monotonic
// reading, which no wall clock shift moves. A shifted reading carries no
// monotonic part (Round(0)): compared with one by mistake, it compares as
// wall time rather than as a monotonic reading moved by the offset.
func (c *Config) wallNow() time.Time {
	if c.ClockNow != nil {
		return c.ClockNow()
	}
	if d := failpoint.Offset(ClockOffsetPoint); d != 0 {
		return time.Now().Round(0).Add(d)
	}
	return time.Now()
}
