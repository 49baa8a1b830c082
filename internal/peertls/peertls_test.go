package peertls

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func pki(t *testing.T) Config {
	t.Helper()
	cfg, err := WriteTestPKI(t.TempDir(), "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func load(t *testing.T, cfg Config) *Creds {
	t.Helper()
	c, err := cfg.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serveGRPC starts a gRPC server with creds (nil: plaintext) and returns
// its address.
func serveGRPC(t *testing.T, creds *Creds) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(creds.ServerOption())
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

func check(addr string, creds *Creds) error {
	conn, err := grpc.NewClient(addr, creds.DialOption())
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestGRPCMutualTLS(t *testing.T) {
	good := load(t, pki(t))
	other := load(t, pki(t)) // another CA
	tlsAddr := serveGRPC(t, good)
	plainAddr := serveGRPC(t, nil)
	cases := []struct {
		name   string
		addr   string
		client *Creds
		ok     bool
	}{
		{"same CA", tlsAddr, good, true},
		{"plaintext client to TLS server", tlsAddr, nil, false},
		{"client of another CA", tlsAddr, other, false},
		{"TLS client to plaintext server", plainAddr, good, false},
		{"plaintext both", plainAddr, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := check(tc.addr, tc.client)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestStreamLayer: the Raft stream layer refuses a peer without a
// certificate of the CA and carries bytes for one with.
func TestStreamLayer(t *testing.T) {
	good := load(t, pki(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl := good.NewStreamLayer(ln, nil)
	defer sl.Close()
	go func() {
		for {
			c, err := sl.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	c, err := sl.Dial(raft.ServerAddress("127.0.0.1:"+portOf(ln)), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo = %q, %v", buf, err)
	}
	c.Close()

	other := load(t, pki(t))
	if c, err := other.Dial(ln.Addr().String(), time.Second); err == nil {
		// The server may only refuse after the client's handshake ends;
		// the first read must fail then.
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("x"))
		if _, err := c.Read(buf); err == nil {
			t.Fatal("a peer of another CA was served")
		}
		c.Close()
	}
	if c, err := (*Creds)(nil).Dial(ln.Addr().String(), time.Second); err == nil {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("ping"))
		if n, err := c.Read(buf); err == nil && string(buf[:n]) == "ping" {
			t.Fatal("a plaintext peer was served")
		}
		c.Close()
	}
}

func portOf(ln net.Listener) string {
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

func TestConfigValidate(t *testing.T) {
	good := pki(t)
	cases := []struct {
		name string
		cfg  Config
		want error
	}{
		{"none", Config{}, nil},
		{"all", good, nil},
		{"cert only", Config{CertFile: good.CertFile}, ErrIncomplete},
		{"no CA", Config{CertFile: good.CertFile, KeyFile: good.KeyFile}, ErrIncomplete},
		{"missing file", Config{CertFile: good.CertFile + ".nope", KeyFile: good.KeyFile, CAFile: good.CAFile}, ErrBadFile},
		{"key is not a CA", Config{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: good.KeyFile}, ErrBadFile},
		{"mismatched key", Config{CertFile: good.CAFile, KeyFile: good.KeyFile, CAFile: good.CAFile}, ErrBadFile},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); !errors.Is(err, tc.want) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestRotation: new certificate files (a new CA) are used for new
// connections without a restart.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	cfg, err := WriteTestPKI(dir, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	server := load(t, cfg)
	addr := serveGRPC(t, server)
	if err := check(addr, load(t, cfg)); err != nil {
		t.Fatal(err)
	}
	// Rotate the server's files to a new CA; a client of the new CA gets
	// in once the server notices (within a second or so).
	time.Sleep(1100 * time.Millisecond) // mtimes must differ
	if _, err := WriteTestPKI(dir, "127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	client := load(t, cfg)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := check(addr, client)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rotated certificates not picked up: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
