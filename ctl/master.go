package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/internal/masterclient"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// MasterError is an error the master (or the way to it) answered, with its
// gRPC code and tablestore reason so a caller can act on them; Unwrap gives
// the original status error.
type MasterError struct {
	// Op is the ctl command that failed.
	Op   string
	Info rpcerr.Info
	err  error
}

// Error prints the failure for a person: what failed, the master's message,
// then code, reason and any metadata (the leader hint, a retry delay).
func (e *MasterError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ctl: %s: ", e.Op)
	switch {
	case e.Info.Code == codes.Unimplemented:
		// Today's masters may predate the operation.
		fmt.Fprintf(&b, "the master does not implement %s (%s)", e.Op, e.Info.Message)
	case e.Info.Message != "":
		b.WriteString(e.Info.Message)
	default:
		b.WriteString(e.err.Error())
	}
	fmt.Fprintf(&b, " [code %s", e.Info.Code)
	if e.Info.Reason != "" {
		fmt.Fprintf(&b, ", reason %s", e.Info.Reason)
	}
	for _, k := range sortedKeys(e.Info.Metadata) {
		fmt.Fprintf(&b, ", %s=%s", k, e.Info.Metadata[k])
	}
	b.WriteString("]")
	return b.String()
}

// Unwrap returns the status error the call failed with.
func (e *MasterError) Unwrap() error { return e.err }

func masterError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, masterclient.ErrNoMaster) {
		return fmt.Errorf("ctl: %s: %w", op, err)
	}
	return &MasterError{Op: op, Info: rpcerr.Parse(err), err: err}
}

// retryable reports whether the master group did not act on a request and
// another member (or a later try) may: a follower's NOT_LEADER, or no
// connection at all (Unavailable without a tablestore reason). Anything the
// leader itself refused is final.
func retryable(err error) bool {
	info := rpcerr.Parse(err)
	return info.Reason == rpcerr.ReasonNotLeader || (info.Code == codes.Unavailable && info.Reason == "")
}

// leaderCall runs fn against the master believed to lead, moving on while
// the answer is retryable, until ctx ends. masterclient.Call does the same
// for short reads, but caps every attempt at 5 s: a move that copies a
// snapshot may take longer, and retrying an operation cut off mid-way is
// worse than waiting for it, so operations get the whole --timeout.
func leaderCall(ctx context.Context, mc *masterclient.Client, fn func(ctx context.Context, c pb.MasterServiceClient) error) error {
	backoff := 25 * time.Millisecond
	for {
		conn, i := mc.Conn()
		err := fn(ctx, pb.NewMasterServiceClient(conn))
		if err == nil || !retryable(err) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", masterclient.ErrNoMaster, err)
		}
		mc.Advance(i)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", masterclient.ErrNoMaster, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// streamEvents sends the event log from seq since to emit. Without follow
// it ends when the master has sent what it has. With follow it runs until
// ctx ends (nil error: the operator stopped it), reconnecting to whichever
// master leads after a stream breaks, resuming after the last event seen, and
// gives up only when no master has served a stream for timeout.
func streamEvents(ctx context.Context, mc *masterclient.Client, since uint64, follow bool, timeout time.Duration, emit func(*pb.Event) error) error {
	next := since
	backoff := 25 * time.Millisecond
	// failingSince is when the current outage began; zero while streams
	// work. An idle followed stream receives nothing for long stretches, so
	// the outage is measured from the first failure, not the last event.
	var failingSince time.Time
	for {
		conn, i := mc.Conn()
		attempt := time.Now()
		sctx, cancel := context.WithCancel(ctx)
		stream, err := pb.NewMasterServiceClient(conn).Events(sctx, &pb.EventsRequest{SinceSeq: next, Follow: follow})
		for err == nil {
			var ev *pb.Event
			if ev, err = stream.Recv(); err != nil {
				break
			}
			failingSince = time.Time{}
			backoff = 25 * time.Millisecond
			// A resumed stream may repeat what was already shown.
			if ev.GetSeq() < next {
				continue
			}
			next = ev.GetSeq() + 1
			if err = emit(ev); err != nil {
				cancel()
				return err
			}
		}
		cancel()
		if ctx.Err() != nil {
			if follow {
				return nil
			}
			return fmt.Errorf("%w: %v", masterclient.ErrNoMaster, ctx.Err())
		}
		if errors.Is(err, io.EOF) {
			if !follow {
				return nil
			}
			// The master ended a followed stream (it stopped leading):
			// find the new leader.
		} else if !retryable(err) {
			return err
		}
		now := time.Now()
		// A stream that lived a while was connected: its end starts a new
		// outage rather than extending an old one.
		if failingSince.IsZero() || now.Sub(attempt) > time.Second {
			failingSince = now
		}
		if now.Sub(failingSince) > timeout {
			return fmt.Errorf("%w within %v: %w", masterclient.ErrNoMaster, timeout, err)
		}
		mc.Advance(i)
		select {
		case <-ctx.Done():
			if follow {
				return nil
			}
			// The last failure, as ErrNoMaster: a bare ctx.Err() read as
			// a master's DeadlineExceeded answer.
			return fmt.Errorf("%w: %w", masterclient.ErrNoMaster, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
