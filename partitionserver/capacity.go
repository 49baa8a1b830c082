package partitionserver

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
)

// capacityBurst is how much of a second of capacity the server may serve
// at once after an idle spell.
const capacityBurst = 100 * time.Millisecond

// admitCapacity applies the server's capacity model (package admission) to
// n entities of leader work on r: it returns at once, after a queueing
// wait bounded by ServerQueueWait, or with 503 ServerBusy and a retry hint.
// A follower's request is left to fail as not-leader without using the
// leader's capacity.
func (v *service) admitCapacity(m rangeMeters, leader bool, n int) error {
	if v.s.capacity == nil || !leader {
		return nil
	}
	d := v.s.capacity.Take(n, time.Now())
	if d.Admit {
		if d.Wait > 0 {
			time.Sleep(d.Wait)
		}
		return nil
	}
	// Not counted as the range's throttling (that names a hot partition
	// in the master's events) but as its unserved demand, which the load
	// report carries for the master's policies.
	m.keys.refusedBusy()
	capacityRefusedTotal.Inc()
	return rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy,
		fmt.Sprintf("server %s is over its capacity of %.0f entities/s", v.s.id, v.s.cfg.ServerCapacity),
		map[string]string{rpcerr.MetaRetryAfterMs: strconv.FormatInt(max(1, d.RetryAfter.Milliseconds()), 10)})
}
