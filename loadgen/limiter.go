package loadgen

import (
	"context"
	"math"
	"sync"
	"time"
)

// Limiter is a token bucket shared by every worker: tokens arrive at rate
// per second up to burst; each request takes one. A request that finds the
// bucket empty reserves the next token and sleeps until it is due, so the
// long-run rate is exact even though each sleep overshoots a little. A nil
// *Limiter lets everything through (--rate 0).
type Limiter struct {
	mu     sync.Mutex
	rate   float64 // tokens per second
	burst  float64
	tokens float64 // negative: tokens already promised to sleepers
	last   time.Time
}

// NewLimiter returns a bucket for rate tokens per second, full at now. The
// burst is 10 ms worth of tokens (at least one): enough to absorb timer
// jitter, small enough that the offered load stays smooth. rate <= 0 gives
// nil, which does not limit.
func NewLimiter(rate float64, now time.Time) *Limiter {
	if rate <= 0 {
		return nil
	}
	burst := math.Max(1, math.Ceil(rate/100))
	return &Limiter{rate: rate, burst: burst, tokens: burst, last: now}
}

// reserve takes one token at now and returns how long the caller must wait
// before using it.
func (l *Limiter) reserve(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if dt := now.Sub(l.last).Seconds(); dt > 0 {
		l.tokens = math.Min(l.burst, l.tokens+dt*l.rate)
		l.last = now
	}
	l.tokens--
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}

// Wait blocks until the caller may send one request, or ctx ends.
func (l *Limiter) Wait(ctx context.Context) error {
	if l == nil {
		return ctx.Err()
	}
	d := l.reserve(time.Now())
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
