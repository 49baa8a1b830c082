package master

import (
	"time"

	pb "tablestore/proto/tablestorepb"
)

// slowDiskMinCommits is the fewest commits of one kind a report's window
// must hold for its median to count as evidence: a few commits (an idle
// server, one just started) say nothing either way. A state file under
// writes commits about every 100 ms, about every 250 ms with the chaos
// fault's 150 ms commits, so ten take 1 to 3 s to gather.
const slowDiskMinCommits = 10

// diskMedian is the worse of a heartbeat's two commit medians (state file,
// Raft log) among those over at least slowDiskMinCommits commits; ok is
// false when neither is (no evidence: a report from an older server, an
// idle one).
func diskMedian(d *pb.DiskLatency) (median time.Duration, ok bool) {
	if d.GetStateCommits() >= slowDiskMinCommits {
		median, ok = seconds(d.GetStateCommitMedianSeconds()), true
	}
	if d.GetLogSyncs() >= slowDiskMinCommits {
		median, ok = max(median, seconds(d.GetLogSyncMedianSeconds())), true
	}
	return median, ok
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// nextSlow is the slow-disk rule, applied to each heartbeat's report: a
// server becomes slow when the median of its commits over the report's
// window (10 s) reaches threshold, and stops being slow only when the
// median falls below half of it (hysteresis: a disk hovering about the
// threshold does not make leaderships come and go). Without evidence
// (too few commits) the state stands; threshold 0 turns the rule off.
// The median, not the maximum, and over seconds of commits, so that
// hiccups of a loaded machine (tens of ms now and then) do not count: the
// state moves only when most commits of the window were slow, and a slow
// stretch yields few commits against the many of a healthy one.
func nextSlow(slow bool, d *pb.DiskLatency, threshold time.Duration) bool {
	if threshold <= 0 {
		return false
	}
	m, ok := diskMedian(d)
	switch {
	case !ok:
		return slow
	case !slow:
		return m >= threshold
	default:
		return m >= threshold/2
	}
}

// diskState is what the master knows of one server's disk.
type diskState struct {
	slow bool
	// median is the last evidence's median (diskMedian).
	median time.Duration
	// cleared is when the server was last found no longer slow.
	cleared time.Time
}

// observeDisk folds one heartbeat's disk report into server's state and
// returns it, and whether it changed (became slow, or cleared).
func (r *reports) observeDisk(server string, d *pb.DiskLatency, threshold time.Duration, now time.Time) (diskState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.disk[server]
	if m, ok := diskMedian(d); ok {
		st.median = m
	}
	slow := nextSlow(st.slow, d, threshold)
	changed := slow != st.slow
	if changed && !slow {
		st.cleared = now
	}
	st.slow = slow
	r.disk[server] = st
	return st, changed
}

// slowServers returns the servers found slow.
func (r *reports) slowServers() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for id, st := range r.disk {
		if st.slow {
			out[id] = true
		}
	}
	return out
}

// noteDisk folds a heartbeat's disk report in and logs a change.
func (s *Server) noteDisk(server string, req *pb.HeartbeatRequest, now time.Time) {
	st, changed := s.reports.observeDisk(server, req.GetDiskLatency(), s.cfg.Policy.SlowDiskCommit, now)
	if !changed {
		return
	}
	d := req.GetDiskLatency()
	args := []any{"server", server, "median_ms", float64(st.median.Microseconds()) / 1000,
		"state_commits", d.GetStateCommits(), "state_commit_median_ms", d.GetStateCommitMedianSeconds() * 1000,
		"log_syncs", d.GetLogSyncs(), "log_sync_median_ms", d.GetLogSyncMedianSeconds() * 1000,
		"threshold", s.cfg.Policy.SlowDiskCommit}
	if st.slow {
		s.logger.Warn("partition server's disk commits are slow: it gets no leadership and its leaderships move off", args...)
	} else {
		s.logger.Info("partition server's disk commits are no longer slow", args...)
	}
}
