package partitionserver

import (
	"errors"
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

// ErrDiskFloor refuses a Raft append while the data directory's free space
// is under a quarter of --disk-reserve.
var ErrDiskFloor = errors.New("partitionserver: data directory under a quarter of its free-space reserve: Raft appends refused")

// diskSampleEvery is how long a sample of the data directory's free space
// stands for: a statfs per write would be cheap, but not free on the
// leaders' hottest path, and the reserve is far larger than what is
// written in this long.
const diskSampleEvery = 100 * time.Millisecond

// diskRetryAfter is the retry delay suggested with a refusal for a full
// disk: freeing space is an operator's (or the master's moves') work.
const diskRetryAfter = 1 * time.Second

// diskGuard keeps the data directory's last free space for what the
// server must write to recover.
//
// Under the reserve, range leaders refuse client writes (admit), so that
// Raft's votes and terms, followers' appends, snapshots, compaction's new
// log segments and the state file's commits of entries already committed
// find room: on a full disk those fail, and a failed commit of the state
// file stops the server (fsm.Store), which then cannot start until space
// is freed. Leaders refuse before the log, so a refusal is definite.
//
// A leader checks only its own disk, so a follower whose disk is smaller
// or fuller would go on filling with its leaders' entries. Under a quarter
// of the reserve (the floor), the server's shared log refuses every Raft
// append (refuseAppend): its replicas fall behind, as after a failed
// write, and catch up once space is freed, and the state file only ever
// commits entries already in the log, in the room left.
type diskGuard struct {
	dir     string
	reserve uint64
	logger  *slog.Logger
	// space is diskSpace (tests replace it).
	space func(dir string) (avail, capacity uint64, ok bool)

	sampledAt atomic.Int64 // unix nanoseconds of the last sample
	avail     atomic.Uint64
	low       atomic.Bool // the last sample was under the reserve
	floor     atomic.Bool // ... under a quarter of it
}

func newDiskGuard(dir string, reserve uint64, logger *slog.Logger) *diskGuard {
	if logger == nil {
		logger = slog.Default()
	}
	return &diskGuard{dir: dir, reserve: reserve, logger: logger, space: diskSpace}
}

// sample refreshes the free space if the last sample is older than
// diskSampleEvery, logging crossings of the reserve and of the floor.
func (g *diskGuard) sample(now time.Time) {
	if at := g.sampledAt.Load(); at != 0 && now.UnixNano()-at < int64(diskSampleEvery) {
		return
	}
	g.sampledAt.Store(now.UnixNano())
	avail, _, ok := g.space(g.dir)
	g.avail.Store(avail)
	low, floor := ok && avail < g.reserve, ok && avail < g.reserve/4
	if was := g.low.Swap(low); was != low {
		if low {
			g.logger.Error("data directory under its free-space reserve: refusing client writes",
				"dir", g.dir, "available_bytes", avail, "reserve_bytes", g.reserve)
		} else {
			g.logger.Warn("data directory over its free-space reserve again: taking client writes",
				"dir", g.dir, "available_bytes", avail, "reserve_bytes", g.reserve)
		}
	}
	if was := g.floor.Swap(floor); was != floor {
		if floor {
			g.logger.Error("data directory under a quarter of its free-space reserve: refusing Raft appends (replicas here fall behind)",
				"dir", g.dir, "available_bytes", avail, "reserve_bytes", g.reserve)
		} else {
			g.logger.Warn("data directory over a quarter of its free-space reserve again: taking Raft appends",
				"dir", g.dir, "available_bytes", avail, "reserve_bytes", g.reserve)
		}
	}
}

// admit returns nil, or the 503 ServerBusy refusal of a client write while
// the free space is under the reserve. Off (nil guard, reserve 0, or free
// space unknown) it admits everything.
func (g *diskGuard) admit(server string, now time.Time) error {
	if g == nil || g.reserve == 0 {
		return nil
	}
	g.sample(now)
	if !g.low.Load() {
		return nil
	}
	diskReserveRefusedTotal.WithLabelValues(server).Inc()
	return rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy,
		fmt.Sprintf("server %s: data directory %s has %d bytes free, under its reserve of %d (--disk-reserve): writes are refused until space is freed",
			server, g.dir, g.avail.Load(), g.reserve),
		map[string]string{rpcerr.MetaRetryAfterMs: strconv.FormatInt(diskRetryAfter.Milliseconds(), 10)})
}

// refuseAppend is the shared log's RefuseAppends: ErrDiskFloor while the
// free space is under a quarter of the reserve, else nil.
func (g *diskGuard) refuseAppend() error {
	if g == nil || g.reserve == 0 {
		return nil
	}
	g.sample(time.Now())
	if !g.floor.Load() {
		return nil
	}
	return fmt.Errorf("%w: %s has %d bytes free, reserve %d", ErrDiskFloor, g.dir, g.avail.Load(), g.reserve)
}
