package partitionserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tablestore/partitionserver/disklatency"
	pb "tablestore/proto/tablestorepb"
)

var (
	diskCommitMedianSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "disk_commit_median_seconds",
		Help: "Median duration of this server's disk commits over the last 10 s, by commit: state (the state file's group commits) " +
			"or log (the shared Raft log's syncs); 0 without commits. The master takes the leaderships off a server whose median stays slow.",
	}, []string{"server", "commit"})
	diskCommitsWindow = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "disk_commits_window",
		Help: "Disk commits in the window of disk_commit_median_seconds, by commit (state, log).",
	}, []string{"server", "commit"})
)

func init() { prometheus.MustRegister(diskCommitMedianSeconds, diskCommitsWindow) }

// diskReport is the heartbeat's account of the server's recent disk
// commits (nil on a server built without New's windows), also exported as
// gauges.
func (s *Server) diskReport(now time.Time) *pb.DiskLatency {
	if s.stateCommits == nil || s.logSyncs == nil {
		return nil
	}
	st, lg := s.stateCommits.Summary(now), s.logSyncs.Summary(now)
	for _, c := range []struct {
		name string
		sum  disklatency.Summary
	}{{"state", st}, {"log", lg}} {
		diskCommitMedianSeconds.WithLabelValues(s.id, c.name).Set(c.sum.Median.Seconds())
		diskCommitsWindow.WithLabelValues(s.id, c.name).Set(float64(c.sum.Commits))
	}
	return &pb.DiskLatency{
		WindowSeconds: s.stateCommits.Span().Seconds(),
		StateCommits:  uint32(st.Commits), StateCommitMedianSeconds: st.Median.Seconds(),
		LogSyncs: uint32(lg.Commits), LogSyncMedianSeconds: lg.Median.Seconds(),
	}
}
