package master

import (
	"slices"
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

// slowDiskPeerFactor is how many times the median of the other servers'
// figures a server's must also reach to be slow (slow is relative, as in
// TiKV PD's slow-store detection): a machine-wide stall (every disk at
// 150 ms on an overloaded host) makes no server a better leader than
// another, and refusing them all leadership would switch off balancing,
// drain and split right-leaders for nothing. 3x: healthy disks of one
// cluster under the same load stay within 2x of each other over a 10 s
// median (a busier server's larger fsync batches), while the failure this
// catches is a disk tens of times slower than its peers (the chaos fault's
// 150 ms against 2-5 ms); clearing uses half of it, as for the threshold.
const slowDiskPeerFactor = 3

// slowDiskExpiry is how long a slow state stands without a report carrying
// evidence: a server that stopped committing (idle, its leaderships gone)
// says nothing of its disk, and a state never confirmed must not keep it
// from leading for good.
const slowDiskExpiry = 60 * time.Second

// slowDiskPeerFresh is how recent a peer's evidence must be to count in
// the median of the others: one report window. A server down, or idle,
// longer than that is no peer to compare with.
const slowDiskPeerFresh = 10 * time.Second

// nextSlow is the slow-disk rule, applied to each heartbeat's report: a
// server becomes slow when the median m of its commits over the report's
// window (10 s) reaches threshold and slowDiskPeerFactor times peer, the
// median of the other servers' figures (peer 0: no other server has
// evidence, the threshold alone), and stops being slow only when m falls
// below half of either (hysteresis: a disk hovering about the threshold
// does not make leaderships come and go). Without evidence (ok false: too
// few commits) the state stands (slowDiskExpiry bounds it); threshold 0
// turns the rule off. The median, not the maximum, and over seconds of
// commits, so that hiccups of a loaded machine (tens of ms now and then)
// do not count: the state moves only when most commits of the window
// were slow, and a slow stretch yields few commits against the many of a
// healthy one.
func nextSlow(slow bool, m time.Duration, ok bool, peer, threshold time.Duration) bool {
	if threshold <= 0 {
		return false
	}
	switch {
	case !ok:
		return slow
	case !slow:
		return m >= threshold && m >= slowDiskPeerFactor*peer
	default:
		return m >= threshold/2 && 2*m >= slowDiskPeerFactor*peer
	}
}

// diskState is what the master knows of one server's disk.
type diskState struct {
	slow bool
	// median is the last evidence's median (diskMedian); onset is the
	// median that made the server slow and peer the others' median then
	// (what an event quotes: hysteresis keeps a later, lower median slow).
	median, onset, peer time.Duration
	// evidence is when a report last carried evidence.
	evidence time.Time
	// cleared is when the server was last found no longer slow.
	cleared time.Time
}

// at is the state as of now: slow expires slowDiskExpiry after the last
// evidence (cleared then).
func (st diskState) at(now time.Time) diskState {
	if st.slow && now.Sub(st.evidence) >= slowDiskExpiry {
		st.slow, st.cleared = false, st.evidence.Add(slowDiskExpiry)
	}
	return st
}

// peerMedian is the lower median of the fresh evidence of servers other
// than server (0 with none): at least half the others are that fast. The
// lower one, so that two slow disks of three are both found (the mean of
// the middle two, 3 and 150 ms, would hide each from the other).
// Called with r.mu held.
func (r *reports) peerMedian(server string, now time.Time) time.Duration {
	var ms []time.Duration
	for id, st := range r.disk {
		if id != server && !st.evidence.IsZero() && now.Sub(st.evidence) < slowDiskPeerFresh {
			ms = append(ms, st.median)
		}
	}
	if len(ms) == 0 {
		return 0
	}
	slices.Sort(ms)
	return ms[(len(ms)-1)/2]
}

// observeDisk folds one heartbeat's disk report into server's state and
// returns it, and whether it changed (became slow, or cleared).
func (r *reports) observeDisk(server string, d *pb.DiskLatency, threshold time.Duration, now time.Time) (diskState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.disk[server].at(now)
	was := r.disk[server].slow
	m, ok := diskMedian(d)
	peer := r.peerMedian(server, now)
	if ok {
		st.median, st.evidence = m, now
	}
	slow := nextSlow(st.slow, m, ok, peer, threshold)
	if slow && !st.slow {
		st.onset, st.peer = m, peer
	}
	if !slow && st.slow {
		st.cleared = now
	}
	st.slow = slow
	r.disk[server] = st
	return st, slow != was
}

// slowServers returns the servers found slow.
func (r *reports) slowServers(now time.Time) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for id, st := range r.disk {
		if st.at(now).slow {
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
		"peer_median_ms", float64(st.peer.Microseconds()) / 1000,
		"state_commits", d.GetStateCommits(), "state_commit_median_ms", d.GetStateCommitMedianSeconds() * 1000,
		"log_syncs", d.GetLogSyncs(), "log_sync_median_ms", d.GetLogSyncMedianSeconds() * 1000,
		"threshold", s.cfg.Policy.SlowDiskCommit}
	if st.slow {
		s.logger.Warn("partition server's disk commits are slow: it gets no leadership and its leaderships move off", args...)
	} else {
		s.logger.Info("partition server's disk commits are no longer slow", args...)
	}
}
