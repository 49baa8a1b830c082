package rangeclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
)

// ErrNoCandidate means the range had no server to try.
var ErrNoCandidate = errors.New("rangeclient: no server to try for the range")

// Decision is what a caller does after a failed attempt.
type Decision struct {
	// Retry: another attempt (on another server or later) may succeed.
	Retry bool
	// Stale: the caller's map of the range is out of date.
	Stale bool
	// NotHosted: the server holds no replica of the range (RANGE_NOT_FOUND;
	// Stale too): another replica of the same descriptor may, so the round
	// goes on to the next candidate before the map is refreshed.
	NotHosted bool
	// Busy: the server refused for load (ServerBusy, ResourceExhausted);
	// callers facing a client may prefer to hand it back with its
	// Retry-After.
	Busy bool
	// Leader is the leader the server named, if any.
	Leader string
}

// Classify is the retry rule for every call to a range.
func Classify(err error) Decision {
	info := rpcerr.Parse(err)
	d := Decision{Leader: info.Metadata[rpcerr.MetaLeader]}
	switch info.Reason {
	case rpcerr.ReasonNotLeader, rpcerr.ReasonUnavailable:
		// Including an outcome the server could not learn: writes carry
		// a request id, so a retry returns the first attempt's result if
		// it was applied.
		d.Retry = true
	case rpcerr.ReasonStaleRange:
		d.Retry, d.Stale = true, true
	case rpcerr.ReasonRangeNotFound:
		d.Retry, d.Stale, d.NotHosted = true, true, true
	case rpcerr.ReasonServerBusy:
		// Unavailable: a leader refused a write it never proposed
		// because its leadership is moving (a transfer settles within an
		// election), so every caller retries it, and a client sees a
		// slower write rather than a 503. ResourceExhausted: a throttle
		// or the capacity model, whose 503 and Retry-After a client
		// should see, as Azure's.
		d.Retry, d.Busy = true, info.Code != codes.Unavailable
	case "":
		// A transport failure before the server answered.
		d.Retry = info.Code == codes.Unavailable
	}
	return d
}

// Attempt is one try of a call on a server.
type Attempt func(ctx context.Context, server string) error

// Candidates returns, for one round, the servers to try in order (the
// believed leader first). An error that Classify says to retry (a key no
// range of the cached map holds: STALE_RANGE) ends the round instead of
// the call.
type Candidates func() ([]string, error)

// Options tune Call.
type Options struct {
	// RetryBusy retries ServerBusy refusals instead of returning them.
	RetryBusy bool
	// OnLeader learns the server that succeeded or that a refusal named.
	OnLeader func(server string)
	// OnFailure learns each failed attempt that Call retries (metrics; a
	// caller drops its leader guess for a server that failed without
	// naming another leader).
	OnFailure func(server string, err error, d Decision)
	// Refresh re-reads the caller's map: after a stale answer, and after
	// a round in which every candidate failed. The next round asks
	// Candidates again.
	Refresh func(ctx context.Context)
	// RefreshWait, when positive, bounds how long a round waits for
	// Refresh (its context ends then). The map's owner may be electing
	// a leader itself (the master), while the range's replicas already
	// know their new leader and name it in their refusals: the next
	// round asks them again instead of waiting for the map.
	RefreshWait time.Duration
	// MinBackoff and MaxBackoff bound the pause between rounds, which
	// doubles from MinBackoff (defaults 10 ms, 200 ms).
	MinBackoff, MaxBackoff time.Duration
	// AttemptTimeout, when positive, abandons an attempt that has not
	// answered within it (a paused or partitioned server keeps its
	// connections open and answers nothing) and tries the next candidate.
	// Set it only when an abandoned attempt is safe to repeat: reads, and
	// writes carrying the request id the partition server deduplicates
	// on.
	AttemptTimeout time.Duration
	// Deadline, when set, is when Call stops starting attempts and returns
	// the last error (ctx still bounds the attempt in flight).
	Deadline time.Time
	// Rounds, when positive, caps the rounds over the candidates.
	Rounds int
}

// Call runs attempt on the candidates, leader hints first, round after
// round with a growing pause, until it succeeds, fails for good, the
// deadline or the round cap is reached, or ctx ends. It returns the last
// error.
func Call(ctx context.Context, cands Candidates, attempt Attempt, o Options) error {
	backoff, maxBackoff := o.MinBackoff, o.MaxBackoff
	if backoff <= 0 {
		backoff = 10 * time.Millisecond
	}
	if maxBackoff <= 0 {
		maxBackoff = 200 * time.Millisecond
	}
	late := func() bool { return !o.Deadline.IsZero() && time.Now().After(o.Deadline) }
	var last error
	refresh := func() {
		if o.Refresh == nil {
			return
		}
		if o.RefreshWait <= 0 {
			o.Refresh(ctx)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, o.RefreshWait)
		defer cancel()
		o.Refresh(rctx)
	}
	for round := 0; ctx.Err() == nil; round++ {
		if o.Rounds > 0 && round >= o.Rounds {
			break
		}
		servers, err := cands()
		stale := false
		if err != nil {
			d := Classify(err)
			if !d.Retry {
				return err
			}
			last, stale = err, d.Stale
			servers = nil
		} else if len(servers) == 0 {
			last = ErrNoCandidate
		}
		tried := map[string]bool{}
		for i := 0; i < len(servers) && !stale; i++ {
			s := servers[i]
			if s == "" || tried[s] {
				continue
			}
			if late() && last != nil {
				return last
			}
			tried[s] = true
			err := try(ctx, s, attempt, o.AttemptTimeout)
			if err == nil {
				if o.OnLeader != nil {
					o.OnLeader(s)
				}
				return nil
			}
			last = err
			d := Classify(err)
			if !d.Retry || (d.Busy && !o.RetryBusy) || ctx.Err() != nil {
				return err
			}
			if o.OnFailure != nil {
				o.OnFailure(s, err, d)
			}
			if d.NotHosted {
				// A replica the map lists but that is not open there (a
				// split-born member its server has yet to create, a moved-in
				// one awaiting its snapshot, one removed): the others of
				// this descriptor may lead it. Refreshed after the round.
				continue
			}
			if d.Stale {
				stale = true
				break
			}
			if d.Leader != "" && !tried[d.Leader] {
				if o.OnLeader != nil {
					o.OnLeader(d.Leader)
				}
				// Follow the hint next.
				servers = append(servers[:i+1], append([]string{d.Leader}, servers[i+1:]...)...)
			}
		}
		// Every candidate failed, or the map is stale: a fresh map may
		// name new servers or a new range.
		refresh()
		if late() {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
	if last == nil {
		last = ctx.Err()
	}
	return last
}

// try runs one attempt, abandoning it after timeout (when positive) with
// an UNAVAILABLE error Classify retries.
func try(ctx context.Context, server string, attempt Attempt, timeout time.Duration) error {
	if timeout <= 0 {
		return attempt(ctx, server)
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := attempt(actx, server)
	if err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		// UNAVAILABLE: the outcome is unknown, and the caller chose the
		// option because a repeat is safe.
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable,
			fmt.Sprintf("rangeclient: %s gave no answer within the attempt timeout %v (%v)", server, timeout, err), nil)
	}
	return err
}
