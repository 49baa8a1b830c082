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
	Help: "Client writes refused (503 ServerBusy) because the master's last heartbeat answer said this server's clock is off by more than its --max-clock-offset, or because its wall clock stepped ahead since the last answer that found it in bounds.",
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
// The verdict comes with the answers to heartbeats, a second or more
// apart, and the master judges a reading only once heartbeats that carry
// it are counted: a wall clock set ahead while this server leads would
// stamp writes, and move its ranges' log clocks, until then (the request
// records' prune hazard of docs/reliability.md section 36). So the guard
// also watches the wall clock against the monotonic one, which no setting
// of the wall clock moves: a wall clock that ran ahead of it by more than
// the refusal threshold since the last heartbeat the master answered
// without refusing is a step, and client writes are refused at once,
// until the answer to a heartbeat that carried the new reading shows the
// master saw it and found it in bounds (the step set a wrong clock right,
// or every server's moved alike), until the master's own verdict takes
// over, or until clockVerdictTTL passes unconfirmed. A step back is not
// refused: the log clock only moves forward, and a clock behind ages no
// record early.
type clockGuard struct {
	logger *slog.Logger
	// wall is the server's wall clock (Config.wallNow).
	wall func() time.Time
	// on mirrors refusing for the writes' path, which then takes no lock
	// while the clock is fine.
	on atomic.Bool
	// baseWall (unix nanoseconds) and baseMono (monotonic nanoseconds
	// since epoch) are the readings of the last heartbeat the master
	// answered without refusing (at first: the start); limit is the
	// refusal threshold, max(bound, clockRefuseOver), in nanoseconds.
	// Atomic for the writes' path.
	epoch              time.Time
	baseWall, baseMono atomic.Int64
	limit              atomic.Int64

	mu sync.Mutex
	// refusing: the last verdict said skewed, past clockRefuseOver.
	refusing bool
	// offset and bound are the verdict's figures; at is when it came (by
	// this process's monotonic clock: the wall clock is the suspect).
	offset, bound time.Duration
	at            time.Time
	// baseOffset is the master's offset for this server in the answer
	// that set the baseline; steppedAt is when a write first found the
	// wall clock stepped ahead of it (zero: no step awaits confirmation).
	baseOffset time.Duration
	steppedAt  time.Time
}

func newClockGuard(logger *slog.Logger, wall func() time.Time) *clockGuard {
	if logger == nil {
		logger = slog.Default()
	}
	if wall == nil {
		wall = time.Now
	}
	g := &clockGuard{logger: logger, wall: wall, epoch: time.Now()}
	g.limit.Store(int64(clockRefuseOver))
	g.rebaseLocked(wall(), g.epoch, 0)
	return g
}

// rebaseLocked makes (wall, mono) the readings steps are measured from,
// offset the master's figure for them.
func (g *clockGuard) rebaseLocked(wall, mono time.Time, offset time.Duration) {
	g.baseWall.Store(wall.UnixNano())
	g.baseMono.Store(int64(mono.Sub(g.epoch)))
	g.baseOffset = offset
}

// drift is how far the wall reading wall ran ahead of the monotonic
// reading mono since the baseline (negative: behind).
func (g *clockGuard) drift(wall, mono time.Time) time.Duration {
	return time.Duration(wall.UnixNano()-g.baseWall.Load()) - (mono.Sub(g.epoch) - time.Duration(g.baseMono.Load()))
}

// set takes the verdict of a heartbeat's answer received at now, and logs
// a change; sentWall and sentMono are the readings taken as the heartbeat
// left (its SentUnixNano is sentWall).
func (g *clockGuard) set(resp *pb.HeartbeatResponse, now, sentWall, sentMono time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset, g.bound = time.Duration(resp.GetClockOffsetNanos()), time.Duration(resp.GetMaxClockOffsetNanos())
	g.limit.Store(int64(max(g.bound, clockRefuseOver)))
	off := g.offset
	if off < 0 {
		off = -off
	}
	refusing := resp.GetClockSkewed() && off > max(g.bound, clockRefuseOver)
	g.at = now
	if !refusing {
		g.confirmLocked(now, sentWall, sentMono)
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
// master answered (at now) without refusing, unless that heartbeat carried a step
// the answer does not show the master saw: its offset for this server
// moved by at least half the step (a master without the clock rule, bound
// 0, shows nothing and is taken at its word).
func (g *clockGuard) confirmLocked(now, sentWall, sentMono time.Time) {
	limit := time.Duration(g.limit.Load())
	if step := g.drift(sentWall, sentMono); step > limit && g.bound > 0 && g.offset-g.baseOffset < step/2 {
		return
	}
	g.rebaseLocked(sentWall, sentMono, g.offset)
	if !g.steppedAt.IsZero() && g.drift(g.wall(), now) <= limit {
		g.steppedAt = time.Time{}
		g.logger.Warn("the master's answer covers this server's wall clock step: taking client writes",
			"offset", g.offset, "bound", g.bound)
	}
}

// admit returns nil, or the 503 ServerBusy refusal of a client write at
// now while the master's verdict, no older than clockVerdictTTL, says this
// server's clock is off, or while a step of its wall clock awaits the
// master's answer.
func (g *clockGuard) admit(server string, now time.Time) error {
	if g == nil {
		return nil
	}
	step := g.drift(g.wall(), now)
	if !g.on.Load() && step <= time.Duration(g.limit.Load()) {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if step > time.Duration(g.limit.Load()) {
		if err := g.stepLocked(server, now, step); err != nil {
			return err
		}
	}
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

// stepLocked is the refusal of a write at now while the wall clock stands
// step ahead of the baseline, nil once the step has waited clockVerdictTTL
// for the master's answer (a server cut off from the master must not
// refuse writes for good; the new reading becomes the baseline).
func (g *clockGuard) stepLocked(server string, now time.Time, step time.Duration) error {
	switch {
	case g.steppedAt.IsZero():
		g.steppedAt = now
		g.logger.Error("this server's wall clock stepped ahead of its monotonic clock: the ranges led here refuse client writes until a heartbeat's answer covers it",
			"step", step)
	case now.Sub(g.steppedAt) >= clockVerdictTTL:
		g.logger.Warn("no heartbeat's answer covered this server's wall clock step in time: taking client writes",
			"step", step, "waited", now.Sub(g.steppedAt))
		g.steppedAt = time.Time{}
		g.rebaseLocked(g.wall(), now, g.baseOffset)
		return nil
	}
	clockSkewRefusedTotal.WithLabelValues(server).Inc()
	return rpcerr.New(codes.ResourceExhausted, rpcerr.ReasonServerBusy,
		fmt.Sprintf("server %s: its wall clock stepped %s ahead since the master last found it in bounds: writes are refused until a heartbeat's answer covers the new reading",
			server, step.Round(time.Millisecond)),
		map[string]string{rpcerr.MetaRetryAfterMs: strconv.FormatInt(clockRetryAfter.Milliseconds(), 10)})
}

// clockNow is the wall clock the heartbeats report (wallclock.go).
func (s *Server) clockNow() time.Time { return s.cfg.wallNow() }
