package partitionserver

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
)

var diskReserveRefusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "tablestore", Subsystem: "partitionserver", Name: "disk_reserve_refused_total",
	Help: "Client writes refused (503 ServerBusy) because the data directory's free space was under --disk-reserve.",
}, []string{"server"})

func init() { prometheus.MustRegister(diskReserveRefusedTotal) }

// diskSampleEvery is how long a sample of the data directory's free space
// stands for: a statfs per write would be cheap, but not free on the
// leaders' hottest path, and the reserve is far larger than what is
// written in this long.
const diskSampleEvery = 100 * time.Millisecond

// diskRetryAfter is the retry delay suggested with a refusal for a full
// disk: freeing space is an operator's (or the master's moves') work.
const diskRetryAfter = 1 * time.Second

// diskGuard refuses client writes while the data directory's free space is
// under the reserve, so that what the server must still write to recover
// (Raft's votes and terms, its followers' appends, snapshots, compaction's
// new log segments, the state file's commits of entries already committed)
// finds room: on a full disk those fail, and a failed commit of the state
// file stops the server (fsm.Store), which then cannot start until space is
// freed. Leaders refuse before the log, so a refusal is definite.
type diskGuard struct {
	dir     string
	reserve uint64
	logger  *slog.Logger
	// space is diskSpace (tests replace it).
	space func(dir string) (avail, capacity uint64, ok bool)

	sampledAt atomic.Int64 // unix nanoseconds of the last sample
	avail     atomic.Uint64
	low       atomic.Bool // the last sample was under the reserve
}

func newDiskGuard(dir string, reserve uint64, logger *slog.Logger) *diskGuard {
	if logger == nil {
		logger = slog.Default()
	}
	return &diskGuard{dir: dir, reserve: reserve, logger: logger, space: diskSpace}
}

// admit returns nil, or the 503 ServerBusy refusal of a client write while
// the free space is under the reserve. Off (nil guard, reserve 0, or free
// space unknown) it admits everything.
func (g *diskGuard) admit(server string, now time.Time) error {
	if g == nil || g.reserve == 0 {
		return nil
	}
	if at := g.sampledAt.Load(); at == 0 || now.UnixNano()-at >= int64(diskSampleEvery) {
		g.sampledAt.Store(now.UnixNano())
		avail, _, ok := g.space(g.dir)
		low := ok && avail < g.reserve
		g.avail.Store(avail)
		if was := g.low.Swap(low); was != low {
			if low {
				g.logger.Error("data directory under its free-space reserve: refusing client writes",
					"dir", g.dir, "available_bytes", avail, "reserve_bytes", g.reserve)
			} else {
				g.logger.Warn("data directory over its free-space reserve again: taking client writes",
					"dir", g.dir, "available_bytes", avail, "reserve_bytes", g.reserve)
			}
		}
	}
	if !g.low.Load() {
		return nil
	}
	diskReserveRefusedTotal.WithLabelValues(server).Inc()
	return rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy,
		fmt.Sprintf("server %s: data directory %s has %d bytes free, under its reserve of %d (--disk-reserve): writes are refused until space is freed",
			server, g.dir, g.avail.Load(), g.reserve),
		map[string]string{rpcerr.MetaRetryAfterMs: strconv.FormatInt(diskRetryAfter.Milliseconds(), 10)})
}
