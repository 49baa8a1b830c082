package connpool

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	pb "tablestore/proto/tablestorepb"
)

// Fixed HTTP/2 flow-control windows. Left unset, gRPC sizes its windows by
// bandwidth-delay estimation, which sends a PING (and reads its ack) about
// once per round trip on a busy connection: with a call per round trip
// (the coalesced reads and writes) that was a frame, and often a socket
// write, per call on each side for no use on a LAN. Fixed windows turn the
// estimation off; these are large enough that a 64 MiB message is not
// held back by window updates more than a few times.
const (
	windowSize     = 4 << 20
	connWindowSize = 16 << 20
)

// Reconnect is how a failed connection to a server is tried again, by the
// pool and by the master client: at most every 500 ms. gRPC's default (1
// s, growing by 1.6 up to 2 min) kept a front-end from a leader that was
// back for ~2.5 s after an outage of 2 - 5 s, while the router's calls
// failed at once on the connection in backoff (chaos seeds 217 and 233:
// ~3 s without writes with a majority up; seed 299 the same for a
// partition server's heartbeats to the masters). A down server is dialled
// about twice a second per client process: nothing beside a lost range.
var Reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: 20 * time.Second, // gRPC's default; zero would fail every attempt at once
}

// ServerOptions are the matching windows for a gRPC server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.InitialWindowSize(windowSize), grpc.InitialConnWindowSize(connWindowSize)}
}

// Pool keeps one connection per address; gRPC multiplexes calls over it.
type Pool struct {
	// dial are extra dial options (TLS credentials).
	dial  []grpc.DialOption
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	local map[string]pb.PartitionServiceClient
}

// New returns an empty pool.
// opts replace the default plaintext credentials (peertls.Creds.DialOption).
func New(opts ...grpc.DialOption) *Pool {
	return &Pool{conns: map[string]*grpc.ClientConn{}, dial: opts}
}

// Conn returns the connection to addr, creating it on first use.
func (p *Pool) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)),
		grpc.WithInitialWindowSize(windowSize), grpc.WithInitialConnWindowSize(connWindowSize),
		grpc.WithConnectParams(Reconnect)}, p.dial...)
	c, err := grpc.NewClient(Target(addr), opts...)
	if err != nil {
		return nil, fmt.Errorf("connpool: dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// Target is the gRPC target for a host:port address: passthrough, so that
// every connection attempt resolves the name afresh (net.Dialer). gRPC's
// default DNS resolver re-resolves a name at most every 30 s: a partition
// server or master pod that came back at a new IP (a Kubernetes restart)
// was dialled at its old one for up to 30 s, while its readiness let a
// rolling update move on. An address that already names a scheme is kept.
func Target(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return "passthrough:///" + addr
}

// Partition returns a PartitionService client for addr.
func (p *Pool) Partition(addr string) (pb.PartitionServiceClient, error) {
	p.mu.Lock()
	l, ok := p.local[addr]
	p.mu.Unlock()
	if ok {
		return l, nil
	}
	c, err := p.Conn(addr)
	if err != nil {
		return nil, err
	}
	return pb.NewPartitionServiceClient(c), nil
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		c.Close()
		delete(p.conns, a)
	}
}
