package connpool

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// TestDialResolvesTheNameEachTime: the pool's connections hand the dialer
// the address as named, so each connection attempt resolves it afresh
// (a pod back at a new IP is reached at once), not an IP gRPC's DNS
// resolver cached for 30 s.
func TestDialResolvesTheNameEachTime(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:7000", "passthrough:///127.0.0.1:7000"},
		{"ps-1.ps.tablestore.svc:7100", "passthrough:///ps-1.ps.tablestore.svc:7100"},
		{"dns:///m.example:7000", "dns:///m.example:7000"},
	} {
		if got := Target(tc.addr); got != tc.want {
			t.Errorf("Target(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go srv.Serve(ln)
	defer srv.Stop()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	named := "localhost:" + port
	var mu sync.Mutex
	var dialled []string
	p := New(grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		return (&net.Dialer{}).DialContext(ctx, "tcp", strings.Replace(addr, "localhost", "127.0.0.1", 1))
	}))
	defer p.Close()
	c, err := p.Conn(named)
	if err != nil {
		t.Fatal(err)
	}
	c.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for s := c.GetState(); s != connectivity.Ready; s = c.GetState() {
		if !c.WaitForStateChange(ctx, s) {
			t.Fatalf("connection to %s not ready: %v", named, s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialled) == 0 || dialled[0] != named {
		t.Fatalf("the dialer was handed %q, want the name %q (resolved per attempt)", dialled, named)
	}
}
