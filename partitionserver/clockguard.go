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
//
// The verdict comes with the answers to heartbeats, and the master judges
// a reading only once heartbeats that carry it are counted: a wall clock
// set ahead while this server leads would stamp writes, and move its
// ranges' log clocks for good, until then (the request records' prune
// hazard of docs/reliability.md section 36; one write is enough, since
// every later Timestamp of the range follows the log clock forward). So
// the guard also holds the stamps (stamp) to the time line the master last
// confirmed, carried forward by the monotonic clock, which no setting of
// the wall clock moves: a write is stamped at most the master's bound
// (holdFor) ahead of it, whatever the wall clock says, until an answer
// confirms the new reading (confirmLocked). A clock behind is not held:
// the log clock only moves forward, and a clock behind ages no record
// early.
type clockGuard struct {
	logger *slog.Logger
	// wall is the server's wall clock (Config.wallNow).
	wall func() time.Time
	// on mirrors refusing for the writes' path, which then takes no lock
	// while the clock is fine.
	on atomic.Bool
	// base is the wall reading (unix nanoseconds) less the monotonic one
	// (nanoseconds since epoch) of the last heartbeat the master answered
	// without refusing (at first: the start): one number, so that a stamp
	// taken while an answer moves it never reads half of each of two
	// baselines (which would make a step that never happened). hold is
	// how far ahead of it, carried forward, a stamp may be (holdFor), in
	// nanoseconds. Atomic for the writes' path.
	epoch time.Time
	base  atomic.Int64
	hold  atomic.Int64

	mu sync.Mutex
	// refusing: the last verdict said skewed, past clockRefuseOver.
	refusing bool
	// offset and bound are the verdict's figures; at is when it came (by
	// this process's monotonic clock: the wall clock is the suspect).
	offset, bound time.Duration
	at            time.Time
	// baseOffset is the master's offset for this server in the answer
	// that set the baseline; stepSent is when the first heartbeat that
	// carried a step the master has not confirmed left (zero: none).
	baseOffset time.Duration
	stepSent   time.Time
}

// defaultClockBound is the master's --max-clock-offset by default, the
// bound a server holds its stamps to before the first answer names the
// master's.
const defaultClockBound = 10 * time.Second

// holdFor is how far ahead of the confirmed time line a stamp may be with
// the master's bound: the bound itself, the offset at which the master
// flags a server (a second at least: a heartbeat's network delay is in
// every measurement); with no clock rule (bound 0), clockRefuseOver.
// Holding a stamp refuses nothing, so it need not wait for the minute the
// refusals wait for.
func holdFor(bound time.Duration) time.Duration {
	if bound <= 0 {
		return clockRefuseOver
	}
	return max(bound, time.Second)
}

// clockStepConfirm is how long the heartbeats that carried a step must
// span before answers in bounds confirm it without the master's offset for
// the server having moved with it: by then the master's last clockWindow
// counted heartbeats all carry the new reading, and an offset from the
// others' within the bound means the wall clock agrees with theirs (a
// host resumed from suspend, whose monotonic clock stood still; or every
// server's clock moved alike).
const clockStepConfirm = 5 * time.Second

func newClockGuard(logger *slog.Logger, wall func() time.Time) *clockGuard {
	if logger == nil {
		logger = slog.Default()
	}
	if wall == nil {
		wall = time.Now
	}
	g := &clockGuard{logger: logger, wall: wall, epoch: time.Now()}
	g.hold.Store(int64(holdFor(defaultClockBound)))
	g.rebaseLocked(wall(), g.epoch, 0)
	return g
}

// rebaseLocked makes (wall, mono) the readings steps are measured from,
// offset the master's figure for them.
func (g *clockGuard) rebaseLocked(wall, mono time.Time, offset time.Duration) {
	g.base.Store(wall.UnixNano() - int64(mono.Sub(g.epoch)))
	g.baseOffset = offset
}

// drift is how far the wall reading wall ran ahead of the monotonic
// reading mono since the baseline (negative: behind).
func (g *clockGuard) drift(wall, mono time.Time) time.Duration {
	return time.Duration(wall.UnixNano()-int64(mono.Sub(g.epoch))) - time.Duration(g.base.Load())
}

// stamp is the time a write proposal carries: the wall clock, but no more
// than holdFor(bound) ahead of the baseline carried forward by the
// monotonic clock (an unconfirmed step ahead is not written into a log).
func (g *clockGuard) stamp() time.Time {
	wall, mono := g.wall(), time.Now()
	hold := time.Duration(g.hold.Load())
	if step := g.drift(wall, mono); step > hold {
		return wall.Add(hold - step).Round(0)
	}
	return wall
}

// set takes the verdict of a heartbeat's answer received at now, and logs
// a change; sentWall and sentMono are the readings taken as the heartbeat
// left (its SentUnixNano is sentWall).
func (g *clockGuard) set(resp *pb.HeartbeatResponse, now, sentWall, sentMono time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset, g.bound = time.Duration(resp.GetClockOffsetNanos()), time.Duration(resp.GetMaxClockOffsetNanos())
	g.hold.Store(int64(holdFor(g.bound)))
	off := g.offset
	if off < 0 {
		off = -off
	}
	refusing := resp.GetClockSkewed() && off > max(g.bound, clockRefuseOver)
	g.at = now
	if !refusing {
		g.confirmLocked(sentWall, sentMono)
	} else if d := g.drift(sentWall, sentMono); d <= time.Duration(g.hold.Load()) {
		// The master's figure for the baseline's clock (the heartbeat
		// carried no step ahead of it): a step that later sets this clock
		// right moves the master's offset from here, not from the figure
		// of the last answer that found it in bounds (the start's 0, or
		// one before a step back that the master's window still hid).
		g.baseOffset = g.offset - d
	}
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

// confirmLocked moves the baseline to the readings of a heartbeat the
// master answered without refusing, unless that heartbeat carried a step
// ahead the answer does not confirm. It confirms it when the master's
// offset for this server (from the others') is within the bound, and
// the answer covers the new reading: the offset moved by half the step or
// more since the baseline, or the heartbeats that carried the step span
// clockStepConfirm. An answer that does not refuse is not enough: the
// master also refuses nobody while it cannot tell which clock is right
// (no majority agrees, too few servers measured after a failover). A
// master without the clock rule (bound 0) shows nothing and is taken at
// its word.
func (g *clockGuard) confirmLocked(sentWall, sentMono time.Time) {
	hold := time.Duration(g.hold.Load())
	step := g.drift(sentWall, sentMono)
	if step > hold && g.bound > 0 {
		if g.stepSent.IsZero() {
			g.stepSent = sentMono
			g.logger.Warn("this server's wall clock stepped ahead of its monotonic clock: its write proposals are held to the time the master last confirmed until an answer covers the new reading",
				"step", step)
		}
		covered := g.offset-g.baseOffset >= step/2 || sentMono.Sub(g.stepSent) >= clockStepConfirm
		if g.offset > g.bound || g.offset < -g.bound || !covered {
			return
		}
	}
	if !g.stepSent.IsZero() {
		g.logger.Warn("the master's answers cover this server's wall clock step: write proposals carry its wall clock again",
			"step", step, "offset", g.offset, "bound", g.bound)
		g.stepSent = time.Time{}
	}
	g.rebaseLocked(sentWall, sentMono, g.offset)
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
