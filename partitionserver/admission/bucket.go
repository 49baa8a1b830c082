package admission

import (
	"sync"
	"time"
)

// minRetryAfter is the shortest retry hint given: shorter ones only make
// clients spin.
const minRetryAfter = 10 * time.Millisecond

// Decision is the answer to one request.
type Decision struct {
	// Admit says the request may run, after Wait.
	Admit bool
	// Wait is how long an admitted request queues first (0: at once).
	Wait time.Duration
	// RetryAfter is, for a refused request, when a retry may fit.
	RetryAfter time.Duration
}

// Bucket is a token bucket of Rate tokens per second holding at most Burst,
// whose requests may queue up to MaxWait for tokens. A queued request takes
// its tokens at once (the level goes below zero), so later requests queue
// behind it and the queue is bounded by MaxWait of the server's capacity.
// Safe for concurrent use.
type Bucket struct {
	rate    float64
	burst   float64
	maxWait time.Duration

	mu     sync.Mutex
	tokens float64
	at     time.Time
}

// New returns a full bucket at now. rate <= 0 returns nil, which admits
// everything (capacity model off).
func New(rate, burst float64, maxWait time.Duration, now time.Time) *Bucket {
	if rate <= 0 {
		return nil
	}
	burst = max(burst, 1)
	return &Bucket{rate: rate, burst: burst, maxWait: max(maxWait, 0), tokens: burst, at: now}
}

// Take asks for n tokens at now.
func (b *Bucket) Take(n int, now time.Time) Decision {
	if b == nil {
		return Decision{Admit: true}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.After(b.at) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.at).Seconds()*b.rate)
		b.at = now
	}
	need := float64(max(n, 1))
	if b.tokens >= need {
		b.tokens -= need
		return Decision{Admit: true}
	}
	wait := b.seconds(need - b.tokens)
	if wait <= b.maxWait {
		b.tokens -= need
		return Decision{Admit: true, Wait: wait}
	}
	if need > b.burst+b.rate*b.maxWait.Seconds() {
		// More than the bucket and its queue ever hold (a change set of
		// 100 entities on a small capacity): refused by the rule above,
		// it would be refused for good, every retry too. It goes when
		// the bucket is full, taking all it needs: later requests queue
		// behind its cost, as behind a queued request's.
		if b.tokens >= b.burst {
			b.tokens -= need
			return Decision{Admit: true}
		}
		return Decision{RetryAfter: max(b.seconds(b.burst-b.tokens), minRetryAfter)}
	}
	// The queue is full: a retry fits once the queue has drained to where
	// this request's wait would be within MaxWait.
	return Decision{RetryAfter: max(wait-b.maxWait, minRetryAfter)}
}

func (b *Bucket) seconds(tokens float64) time.Duration {
	return time.Duration(tokens / b.rate * float64(time.Second))
}
