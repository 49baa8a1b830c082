package masterclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"tablestore/internal/connpool"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// ErrNoMaster means no master answered as leader before the deadline.
var ErrNoMaster = errors.New("masterclient: no master leader reachable")

// Client calls the master group.
type Client struct {
	addrs []string
	conns []*grpc.ClientConn

	mu      sync.Mutex
	current int
}

// New dials every address lazily (gRPC connects on first use).
// opts replace the default plaintext credentials (peertls.Creds.DialOption).
func New(addrs []string, opts ...grpc.DialOption) (*Client, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("masterclient: no master address")
	}
	c := &Client{addrs: addrs}
	for _, a := range addrs {
		conn, err := grpc.NewClient(connpool.Target(a), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithConnectParams(connpool.Reconnect),
			// The partition map of a large cluster (tables, ranges, the
			// accounts' service properties) may pass gRPC's 4 MiB default.
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20))}, opts...)...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("masterclient: dial %s: %w", a, err)
		}
		c.conns = append(c.conns, conn)
	}
	return c, nil
}

// Each returns every master's address and connection, in the order given
// (ctl debug zip asks each master about itself, not only the leader).
func (c *Client) Each() (addrs []string, conns []*grpc.ClientConn) {
	return c.addrs, c.conns
}

// ParseAddrs splits a comma-separated address list.
func ParseAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Close closes every connection.
func (c *Client) Close() error {
	for _, conn := range c.conns {
		conn.Close()
	}
	return nil
}

// retryable reports whether another master (or a later try) may succeed.
func retryable(err error) bool {
	info := rpcerr.Parse(err)
	if info.Reason == rpcerr.ReasonNotLeader {
		return true
	}
	switch info.Code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// leaderAnswered reports whether err is the leading master's own answer
// that its work ran out of time (a DeadlineExceeded carrying a reason, as
// a deleted table's ranges not frozen in time): the call is retried on the
// same master after a pause, not moved to the next one, which would send
// every caller of the shared client through a follower first. A master
// that hangs gives a bare DeadlineExceeded.
func leaderAnswered(err error) bool {
	info := rpcerr.Parse(err)
	return info.Code == codes.DeadlineExceeded && info.Reason != ""
}

// hung reports whether an attempt that failed with err as the caller's
// ctx ended was one that hung until that deadline: the master never
// answered (a paused or partitioned master keeps its connection open, or
// never completes the handshake). The next call then starts on the next
// master. Without it a caller whose deadline is shorter than the attempt's
// (the partition server's heartbeat: 3 s against 5 s) returned without
// moving on, and stayed on a silent master for as long as it stayed
// silent. A call the caller cancelled tells nothing about the master, nor
// does a call shorter than hungAfter: a caller's own short deadline
// (a front-end request's ?timeout=1) ends attempts on a healthy but busy
// leader, and moving every caller off it (the client is shared) would
// send them through the followers, or a cut-off master, first.
func hung(ctx context.Context, err error, took time.Duration) bool {
	return took >= hungAfter && errors.Is(ctx.Err(), context.DeadlineExceeded) && rpcerr.Parse(err).Code == codes.DeadlineExceeded
}

// hungAfter is the least time a call must have waited to count its attempt as
// hung: under the heartbeat's 3 s, over any answer a healthy master gives
// on a loaded machine.
const hungAfter = 2 * time.Second

// Call runs fn against the leader, moving to the next master while the one
// tried is not the leader or unreachable, until ctx ends.
func (c *Client) Call(ctx context.Context, fn func(ctx context.Context, mc pb.MasterServiceClient) error) error {
	backoff := 20 * time.Millisecond
	began := time.Now()
	var last error
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		i := c.current
		c.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(cctx, pb.NewMasterServiceClient(c.conns[i]))
		took := time.Since(began) // the call's, not the attempt's: NotLeader hops before a silent master count
		cancel()
		if err == nil {
			return nil
		}
		last = err
		if !retryable(err) || ctx.Err() != nil {
			if ctx.Err() != nil && retryable(err) {
				if hung(ctx, err, took) {
					c.Advance(i)
				}
				return fmt.Errorf("%w: %v", ErrNoMaster, last)
			}
			return err
		}
		answered := leaderAnswered(err)
		if !answered {
			c.Advance(i)
		}
		if answered || (attempt+1)%len(c.conns) == 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %v", ErrNoMaster, last)
			case <-time.After(backoff):
			}
			if backoff < 500*time.Millisecond {
				backoff *= 2
			}
		}
	}
}

// Conn returns the connection to the master currently believed to lead;
// streaming calls use it directly.
func (c *Client) Conn() (*grpc.ClientConn, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns[c.current], c.current
}

// Advance moves past master i after a failed streaming call.
func (c *Client) Advance(i int) {
	c.mu.Lock()
	if c.current == i {
		c.current = (i + 1) % len(c.conns)
	}
	c.mu.Unlock()
}
