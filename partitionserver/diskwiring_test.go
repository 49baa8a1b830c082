package partitionserver

import (
	"testing"
	"time"
)

// TestHeartbeatCarriesDiskLatency: a server's heartbeat reports the Raft
// log's syncs and the state file's commits of the writes it made (wiring:
// raftlog.Options{ObserveSync} and the state store's hook feed the windows
// diskReport reads; without them the master would never see a slow disk),
// and the time in state commits reaches its counter.
func TestHeartbeatCarriesDiskLatency(t *testing.T) {
	s := startedServer(t)
	// The counter is the process's, shared by every test's server of
	// the same id: what this server adds is measured from here.
	commitsBefore := counterValue(t, stateCommitSeconds.WithLabelValues(s.id))
	const writes = 12
	leadingRangeWithWrites(t, s, 49, 1, writes)
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := s.diskReport(time.Now())
		if d.GetLogSyncs() >= writes && d.GetLogSyncMedianSeconds() > 0 &&
			d.GetStateCommits() > 0 && d.GetStateCommitMedianSeconds() > 0 &&
			counterValue(t, stateCommitSeconds.WithLabelValues(s.id)) > commitsBefore {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("disk report %v after %d writes: want at least %d log syncs and some state commits, with medians", d, writes, writes)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
