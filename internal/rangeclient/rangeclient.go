package rangeclient

import (
	"context"
	"errors"
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
	// Busy: the server refused for now (ServerBusy); callers facing a
	// client may prefer to hand it back with its Retry-After.
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
	case rpcerr.ReasonStaleRange, rpcerr.ReasonRangeNotFound:
		d.Retry, d.Stale = true, true
	case rpcerr.ReasonServerBusy:
		d.Retry, d.Busy = true, true
	case "":
		// A transport failure before the server answered.
		d.Retry = info.Code == codes.Unavailable
	}
	return d
}

// Attempt is one try of a call on a server.
type Attempt func(ctx context.Context, server string) error

// Candidates returns, for one round, the servers to try in order (the
// believed leader first).
type Candidates func() ([]string, error)

// Options tune Call.
type Options struct {
	// RetryBusy retries ServerBusy refusals instead of returning them.
	RetryBusy bool
	// OnLeader learns the server that succeeded or that a refusal named.
	OnLeader func(server string)
	// MaxBackoff caps the pause between rounds (default 200 ms).
	MaxBackoff time.Duration
}

// Call runs attempt on the candidates, leader hints first, round after
// round with a growing pause, until it succeeds, fails for good, or ctx
// ends. It returns the last error.
func Call(ctx context.Context, cands Candidates, attempt Attempt, o Options) error {
	maxBackoff := o.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 200 * time.Millisecond
	}
	backoff := 10 * time.Millisecond
	var last error
	for ctx.Err() == nil {
		servers, err := cands()
		if err != nil {
			return err
		}
		if len(servers) == 0 {
			last = ErrNoCandidate
		}
		tried := map[string]bool{}
		for i := 0; i < len(servers); i++ {
			s := servers[i]
			if s == "" || tried[s] {
				continue
			}
			tried[s] = true
			err := attempt(ctx, s)
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
			if d.Leader != "" && !tried[d.Leader] {
				if o.OnLeader != nil {
					o.OnLeader(d.Leader)
				}
				// Follow the hint next.
				servers = append(servers[:i+1], append([]string{d.Leader}, servers[i+1:]...)...)
			}
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
