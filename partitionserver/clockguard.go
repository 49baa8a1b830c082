package partitionserver

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

var clockSkewRefusedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: "tablestore", Subsystem: "partitionserver", Name: "clock_skew_refused_total",
	Help: "Client writes refused (503 ServerBusy) because the master's last heartbeat answer said this server's clock is off by more than its --max-clock-offset.",
}, []string{"server"})

func init() { prometheus.MustRegister(clockSkewRefusedTotal) }

// clockVerdictTTL is how long the master's verdict that this server's
// clock is off stands: a server cut off from the master cannot have it
// cleared, and must not refuse writes for good (the master moves its
// leaderships off in the meantime, and a server it cannot hear from is
// soon down to it).
const clockVerdictTTL = 30 * time.Second

// clockRefuseOver is how far off a skewed clock must be before the
// ranges led here refuse writes (or the master's bound, if larger): a
// tenth of the request records' 10 minutes. Closer than that the
// master's verdict only moves the leaderships off (at its pace, a few at
// a time): the records are not at risk yet, and refusing every write of
// a server's ranges until the last leadership left would cost more than
// Timestamps a few seconds off.
const clockRefuseOver = time.Minute

// clockRetryAfter is the retry delay suggested with a refusal: the
// master moves the range's leadership off within seconds.
const clockRetryAfter = 1 * time.Second

// clockGuard refuses client writes on the ranges led here while the
// master says this server's clock is off from the others' by more than
// its bound and by more than clockRefuseOver. A leader stamps each write's
// Timestamp from its wall clock, and that also moves the range's log
// clock, which ages the request records out (fsm/dedup.go): a clock far ahead would make entities carry
// wrong Timestamps and let a retried write apply twice. Leaders refuse
// before the log, so a refusal is definite.
type clockGuard struct {
	logger *slog.Logger
	// on mirrors refusing for the writes' path, which then takes no lock
	// while the clock is fine.
	on atomic.Bool

	mu sync.Mutex
	// refusing: the last verdict said skewed, past clockRefuseOver.
	refusing bool
	// offset and bound are the verdict's figures; at is when it came (by
	// this process's monotonic clock: the wall clock is the suspect).
	offset, bound time.Duration
	at            time.Time
}

func newClockGuard(logger *slog.Logger) *clockGuard {
	if logger == nil {
		logger = slog.Default()
	}
	return &clockGuard{logger: logger}
}

// set takes the verdict of a heartbeat's answer received at now, and logs
// a change.
func (g *clockGuard) set(resp *pb.HeartbeatResponse, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset, g.bound = time.Duration(resp.GetClockOffsetNanos()), time.Duration(resp.GetMaxClockOffsetNanos())
	off := g.offset
	if off < 0 {
		off = -off
	}
	refusing := resp.GetClockSkewed() && off > max(g.bound, clockRefuseOver)
	g.at = now
	if refusing == g.refusing {
		return
	}
	g.refusing = refusing
	g.on.Store(refusing)
	if refusing {
		g.logger.Error("the master finds this server's clock off by over a minute: the ranges led here refuse client writes",
			"offset", g.offset, "bound", g.bound)
	} else {
		g.logger.Warn("the master finds this server's clock within a minute again: taking client writes",
			"offset", g.offset, "bound", g.bound)
	}
}

// admit returns nil, or the 503 ServerBusy refusal of a client write
// while the master's verdict, no older than clockVerdictTTL at now, says
// this server's clock is off.
func (g *clockGuard) admit(server string, now time.Time) error {
	if g == nil || !g.on.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.refusing {
		return nil
	}
	if now.Sub(g.at) >= clockVerdictTTL {
		g.refusing = false
		g.on.Store(false)
		g.logger.Warn("the master's verdict that this server's clock is off expired unconfirmed: taking client writes",
			"offset", g.offset, "bound", g.bound, "verdict_age", now.Sub(g.at))
		return nil
	}
	clockSkewRefusedTotal.WithLabelValues(server).Inc()
	return rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy,
		fmt.Sprintf("server %s: its clock is off by %s from the other servers', over the master's bound of %s (--max-clock-offset): writes are refused until it is back in bounds or the range's leadership moves",
			server, g.offset.Round(time.Millisecond), g.bound),
		map[string]string{rpcerr.MetaRetryAfterMs: strconv.FormatInt(clockRetryAfter.Milliseconds(), 10)})
}

// clockNow is the wall clock the heartbeats report (wallclock.go).
func (s *Server) clockNow() time.Time { return s.cfg.wallNow() }
