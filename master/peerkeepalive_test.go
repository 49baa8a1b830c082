package master

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "tablestore/proto/tablestorepb"
)

// TestSilentPeerConnectionClosed: a front-end whose link goes silent (its
// packets dropped, the connection never closed) is unlisted once the
// master's keepalive ping goes unanswered, and its watch ends. Before, the
// master held the stream until TCP gave up, many minutes.
func TestSilentPeerConnectionClosed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	s := leadingMaster(t, func(c *Config) { c.PeerKeepalive = time.Second })
	direct, err := grpc.NewClient(s.cfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	listed := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := pb.NewMasterServiceClient(direct).ListFrontends(ctx, &pb.ListFrontendsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetFrontends())
	}

	p := newStallingProxy(t, s.cfg.GRPCAddr)
	viaProxy, err := grpc.NewClient(p.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := pb.NewMasterServiceClient(viaProxy).WatchPartitionMap(ctx,
		&pb.WatchPartitionMapRequest{Deltas: true, Frontend: &pb.FrontendInfo{Id: "fe-silent"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	if n := listed(); n != 1 {
		t.Fatalf("%d front-ends listed, want the one watching", n)
	}
	p.stall()
	waitUntil(t, 10*time.Second, "the silent front-end to be unlisted", func() bool { return listed() == 0 })
}

// stallingProxy forwards TCP connections to a target until stall, after
// which it forwards nothing more and closes nothing: a link that drops
// every packet.
type stallingProxy struct {
	ln      net.Listener
	stalled atomic.Bool
	stop    chan struct{}
	mu      sync.Mutex
	conns   []net.Conn
}

func newStallingProxy(t *testing.T, target string) *stallingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{ln: ln, stop: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	t.Cleanup(func() {
		close(p.stop)
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *stallingProxy) addr() string { return p.ln.Addr().String() }

func (p *stallingProxy) stall() { p.stalled.Store(true) }

// pipe copies src to dst until an error or the stall, then holds both.
func (p *stallingProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.stalled.Load() {
			<-p.stop
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
