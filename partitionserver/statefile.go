package partitionserver

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"tablestore/partitionserver/fsm"
)

var (
	stateFileBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "state_file_bytes",
		Help: "Size of this server's state file (state.db).",
	}, []string{"server"})
	stateFileFreeBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "tablestore", Subsystem: "partitionserver", Name: "state_file_free_bytes",
		Help: "Bytes of the state file that bbolt holds free (its freed pages and its tail past the last page in use): " +
			"a restart gives them back to the file system when they are at least --state-compact-free of the file and 64 MiB.",
	}, []string{"server"})
)

func init() { prometheus.MustRegister(stateFileBytes, stateFileFreeBytes) }

// openState opens the state file at path, compacting it first when enough
// of it is free (fsm.OpenCompacting), and logs what the compaction did. A
// compaction that fails before its copy replaces the file leaves the file
// as it was and the start goes on; only a failure after that is the
// start's.
func (s *Server) openState(path string) error {
	policy := fsm.CompactPolicy{MinFreeShare: s.cfg.StateCompactFree, MaxLive: s.cfg.StateCompactMaxLive, Reserve: s.cfg.DiskReserve}
	if s.disk != nil {
		// The write guard's figure (tests replace it).
		policy.Space = func(dir string) (uint64, bool) {
			avail, _, ok := s.disk.space(dir)
			return avail, ok
		}
	}
	store, c, err := fsm.OpenCompacting(path, s.cfg.StateCommitInterval, policy)
	if err != nil {
		return fmt.Errorf("partitionserver: state file %s: %w", path, err)
	}
	s.store = store
	s.logCompaction(path, c)
	return nil
}

// logCompaction logs what the start's compaction of the state file did.
func (s *Server) logCompaction(path string, c fsm.Compaction) {
	if c.LeftoverRemoved {
		s.logger.Info("removed the copy an interrupted state file compaction left", "path", path+fsm.CompactSuffix)
	}
	switch {
	case c.Compacted:
		s.logger.Info("compacted the state file", "path", path, "bytes_before", c.Size, "free_bytes_before", c.Free,
			"bytes_after", c.After, "took", c.Took)
	case errors.Is(c.Err, fsm.ErrTooLargeToCompact):
		s.logger.Warn("state file not compacted: its live data is over --state-compact-max-live (a start that compacts it must outlast the master's --replicate-after: raise both for a planned restart)", "path", path,
			"bytes", c.Size, "free_bytes", c.Free, "err", c.Err)
	case errors.Is(c.Err, fsm.ErrNoRoomToCompact):
		s.logger.Warn("state file not compacted: the disk lacks room for its copy and --disk-reserve", "path", path,
			"bytes", c.Size, "free_bytes", c.Free, "err", c.Err)
	case c.Err != nil:
		s.logger.Warn("state file compaction failed; starting on the file as it was", "path", path,
			"bytes", c.Size, "free_bytes", c.Free, "err", c.Err)
	}
}

// publishStateFile sets the state file's size and free-bytes gauges (once
// started and each heartbeat: a stat, a read transaction's meta and
// bbolt's counters).
func (s *Server) publishStateFile() {
	if s.store == nil {
		return
	}
	size, free, err := s.store.FileSpace()
	if err != nil {
		return
	}
	stateFileBytes.WithLabelValues(s.id).Set(float64(size))
	stateFileFreeBytes.WithLabelValues(s.id).Set(float64(free))
}
