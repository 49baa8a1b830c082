package master

import (
	"context"
	"fmt"
	"sync"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// ErrTargetBehind refuses a leadership transfer to a follower that is not
// known to be live and caught up: raft's transfer to such a target can
// keep the leader refusing writes (docs/reliability.md).
var ErrTargetBehind = fmt.Errorf("%w: not live and caught up", ErrBadTarget)

// transferMaxLag is the most entries a transfer target's last reported
// applied index may trail the leader's: reports are a heartbeat apart, so
// a live follower of a busy range trails by about one interval of writes.
const transferMaxLag = 2000

// replicaReport is one replica's last reported applied index.
type replicaReport struct {
	applied uint64
	at      time.Time
}

// progress remembers, from heartbeats, how far every replica has applied
// its range's log.
type progress struct {
	mu sync.Mutex
	m  map[uint64]map[string]replicaReport
	// since and seen are, per server, when its last full report and its
	// last report were taken: a report since the last full one stands
	// until the last (a delta leaves out what did not change).
	since, seen map[string]time.Time
}

func newProgress() *progress {
	return &progress{m: map[uint64]map[string]replicaReport{}, since: map[string]time.Time{}, seen: map[string]time.Time{}}
}

// observe records a heartbeat's range statuses from server: with full,
// every replica it hosts; otherwise those that changed, and removed.
func (p *progress) observe(server string, ranges []*pb.RangeStatus, removed []uint64, full bool, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if full {
		for id, byServer := range p.m {
			delete(byServer, server)
			if len(byServer) == 0 {
				delete(p.m, id)
			}
		}
		p.since[server] = now
	}
	p.seen[server] = now
	for _, id := range removed {
		delete(p.m[id], server)
	}
	for _, rs := range ranges {
		byServer := p.m[rs.GetRangeId()]
		if byServer == nil {
			byServer = map[string]replicaReport{}
			p.m[rs.GetRangeId()] = byServer
		}
		byServer[server] = replicaReport{applied: rs.GetAppliedIndex(), at: now}
	}
}

// transferable reports why range id's leadership should not move to
// server to, or nil: to must have reported the range within maxAge, and
// its applied index must be within transferMaxLag of the best report.
func (p *progress) transferable(id uint64, to string, now time.Time, maxAge time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	reports := p.m[id]
	r, ok := reports[to]
	if !ok || now.Sub(p.reportedAt(to, r)) > maxAge {
		return fmt.Errorf("%w: %s has not reported range %d for %v", ErrTargetBehind, to, id, maxAge)
	}
	var best uint64
	for sv, o := range reports {
		if now.Sub(p.reportedAt(sv, o)) <= maxAge {
			best = max(best, o.applied)
		}
	}
	if r.applied+transferMaxLag < best {
		return fmt.Errorf("%w: %s applied range %d to %d, others to %d", ErrTargetBehind, to, id, r.applied, best)
	}
	return nil
}

// reportedAt is when server's report r last held. Called with p.mu held.
func (p *progress) reportedAt(server string, r replicaReport) time.Time {
	if since, ok := p.since[server]; ok && !r.at.Before(since) {
		return p.seen[server]
	}
	return r.at
}

// transferWait bounds how long a transfer waits for its target to catch up
// (a voter a move just added installs its snapshot first).
const transferWait = 10 * time.Second

// awaitTransferable waits until range id's leadership may move to server
// to, or refuses: leadership goes only to live, caught-up followers.
func (s *Server) awaitTransferable(ctx context.Context, id uint64, to string) error {
	maxAge := min(s.cfg.ServerTimeout, 3*time.Second)
	deadline := time.Now().Add(transferWait)
	for {
		err := s.progress.transferable(id, to, time.Now(), maxAge)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
