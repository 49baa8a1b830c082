package master

import (
	"slices"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// clockFresh is how recent a server's clock measurement must be to count:
// a server down, or not heard from, for longer is no peer to compare
// with, and its own verdict is not refreshed (its partition server lets a
// verdict expire after 30 s).
const clockFresh = 10 * time.Second

// clockVerdict is the clock rule's finding for one server.
type clockVerdict struct {
	// offset is the server's offset from the reference.
	offset time.Duration
	// skewed: |offset| is over the bound.
	skewed bool
}

// clockVerdicts is the clock rule: offsets are, per server whose clock
// measurement is confirmed, its clock minus the master's (as measured),
// and of is how many servers were heard from lately (confirmed or not).
// A server agrees with another whose offset is within bound of its own; a
// server is skewed when it agrees with fewer than a majority of of (itself
// counted) while some server agrees with a majority: the majority's clock
// is taken as right. Offsets between servers, not against the master's
// clock, so that a master whose clock is off shifts every offset alike
// and flags nobody. Without a majority that agrees (two servers apart, an
// even split, or too few confirmed yet, as right after a master failover)
// which clock is right cannot be told, and nobody is flagged: a false
// verdict would refuse writes on healthy leaders. bound 0: the rule is
// off. A server that was skewed last time agrees only within half the bound
// (hysteresis: a clock hovering at the bound would flip the verdict at
// every heartbeat, and the leaderships would follow it to and fro). The
// offset reported is from the median of the confirmed offsets, for the
// logs and gauges.
func clockVerdicts(offsets map[string]time.Duration, of int, bound time.Duration, was map[string]bool) map[string]clockVerdict {
	if len(offsets) == 0 {
		return nil
	}
	sorted := make([]time.Duration, 0, len(offsets))
	for _, o := range offsets {
		sorted = append(sorted, o)
	}
	slices.Sort(sorted)
	ref := medianOf(sorted)
	majority := max(of, len(offsets))/2 + 1
	// agreeing counts the offsets within w of o (o's own among them): a
	// window of the sorted offsets, not a pass over every pair (the
	// master judges at every heartbeat of every server).
	agreeing := func(o, w time.Duration) int {
		lo, _ := slices.BinarySearch(sorted, o-w)
		hi, found := slices.BinarySearch(sorted, o+w)
		for found && hi < len(sorted) && sorted[hi] == o+w {
			hi++
		}
		return hi - lo
	}
	agree := make(map[string]int, len(offsets))
	anchored := false
	for id, o := range offsets {
		within := bound
		if was[id] {
			within = bound / 2
		}
		agree[id] = agreeing(o, within)
		anchored = anchored || agree[id] >= majority
	}
	out := make(map[string]clockVerdict, len(offsets))
	for id, o := range offsets {
		out[id] = clockVerdict{offset: o - ref, skewed: bound > 0 && anchored && agree[id] < majority}
	}
	return out
}

// medianOf is the median of sorted offsets (the mean of the middle two
// for an even count; sorted is not empty).
func medianOf(sorted []time.Duration) time.Duration {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	// Halved before adding: two offsets near the limits of int64 (a
	// nonsense clock) must not overflow.
	return sorted[n/2-1]/2 + sorted[n/2]/2
}

// clockSample is one server's clock measurement: its offset (its clock
// minus the master's), from its last heartbeats.
type clockSample struct {
	// offset is the measurement: the highest of recent.
	offset time.Duration
	// recent are the offsets of the last clockWindow heartbeats that
	// counted (each the highest of its burst: heartbeats under
	// clockConfirmGap apart count as one), oldest first.
	recent []time.Duration
	// seen is the last heartbeat's receive time, counted the last
	// counted one's, n the heartbeats counted since the last silence of
	// clockFresh or more.
	seen, counted time.Time
	n             int
}

// clockConfirm is how many heartbeats within clockFresh a measurement
// must stand for to be judged: the first after a silence (a server
// resumed after a pause, a heartbeat that sat in a retransmission) may be
// the only one in the window and as delayed as the silence was long, and
// one more heartbeat half a second later replaces it with a truer figure.
const clockConfirm = 2

// clockConfirmGap is the least time between two heartbeats that both
// count towards clockConfirm (servers heartbeat every 500 ms by default).
const clockConfirmGap = 200 * time.Millisecond

// clockWindow is how many counted heartbeats a measurement is the best
// of: enough that one held up (a loaded master, a retransmission) does
// not make a clock look behind, few enough (2 s at the default 500 ms
// heartbeats) that a clock set back, or set right after running ahead,
// is seen within seconds. The highest of the last 10 s held a clock set
// right for 10 s (flagged still, its leaderships moved off after it was
// fixed), hid a clock set behind as long, and, holding a fixed server's
// old reading, split four servers two against two so that a server
// really ahead was flagged by nobody (chaos, session 24).
const clockWindow = 4

// observeClock folds a heartbeat's clock into server's measurement: its
// offset is the heartbeat's sent time less now, the master's receive time.
// The network delay only lowers that figure, so the highest of the last
// clockWindow counted samples is kept (the least delayed one, as NTP's
// filter keeps the sample of least delay): a heartbeat held up for
// seconds does not make a server's clock look behind, and a burst of
// heartbeats that queued during a cut counts as one sample, its best. A
// server that sent no clock (older, 0) keeps none.
func (r *reports) observeClock(server string, sentUnixNano int64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sentUnixNano == 0 {
		delete(r.clocks, server)
		return
	}
	o := time.Unix(0, sentUnixNano).Sub(now)
	c, ok := r.clocks[server]
	switch {
	case !ok || now.Sub(c.seen) >= clockFresh:
		c = clockSample{recent: []time.Duration{o}, n: 1, counted: now}
	case now.Sub(c.counted) < clockConfirmGap:
		// Heartbeats that queued up during a cut arrive back to back
		// at the heal, all as late: they count as one. Timed from the
		// last counted one, not the last one, so that a server
		// heartbeating more often than clockConfirmGap still counts
		// (its heartbeats, each under the gap from the last, never did:
		// its clock was never judged).
		c.recent[len(c.recent)-1] = max(c.recent[len(c.recent)-1], o)
	default:
		keep := c.recent[max(0, len(c.recent)-clockWindow+1):]
		c.recent = append(append(make([]time.Duration, 0, clockWindow), keep...), o)
		c.n++
		c.counted = now
	}
	c.seen = now
	c.offset = slices.Max(c.recent)
	if r.clocks == nil {
		r.clocks = map[string]clockSample{}
	}
	r.clocks[server] = c
}

// clockVerdictsAt is the clock rule over the fresh measurements as of now.
func (r *reports) clockVerdictsAt(bound time.Duration, now time.Time) map[string]clockVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clockVerdictsLocked(bound, now)
}

// clockVerdictsLocked is clockVerdictsAt with r.mu held.
func (r *reports) clockVerdictsLocked(bound time.Duration, now time.Time) map[string]clockVerdict {
	offsets := make(map[string]time.Duration, len(r.clocks))
	heard := 0
	for id, c := range r.clocks {
		if now.Sub(c.seen) >= clockFresh {
			continue
		}
		heard++
		if c.n >= clockConfirm {
			offsets[id] = c.offset
		}
	}
	return clockVerdicts(offsets, heard, bound, r.skewed)
}

// noteClock folds a heartbeat's clock in, answers the server's verdict in
// resp, and logs a change of it.
func (s *Server) noteClock(server string, req *pb.HeartbeatRequest, resp *pb.HeartbeatResponse, now time.Time) {
	bound := s.cfg.Policy.MaxClockOffset
	s.reports.observeClock(server, req.GetSentUnixNano(), now)
	v := s.reports.clockVerdictsAt(bound, now)[server]
	resp.ClockSkewed, resp.ClockOffsetNanos, resp.MaxClockOffsetNanos = v.skewed, int64(v.offset), int64(bound)
	s.reports.mu.Lock()
	was := s.reports.skewed[server]
	if s.reports.skewed == nil {
		s.reports.skewed = map[string]bool{}
	}
	s.reports.skewed[server] = v.skewed
	s.reports.mu.Unlock()
	if was == v.skewed {
		return
	}
	args := []any{"server", server, "offset", v.offset, "bound", bound}
	if v.skewed {
		s.logger.Warn("partition server's clock is off: it gets no leadership and its leaderships move off (past a minute off its leaders refuse writes)", args...)
	} else {
		s.logger.Info("partition server's clock is no longer off", args...)
	}
}
