package master

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/logging"
	"tablestore/internal/peertls"
)

// TestMasterHello: a connection from a master of this build reaches raft
// with its bytes intact; one without the hello (an older master, whose
// first byte is a raft RPC type) or with another version's is refused.
func TestMasterHello(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var creds *peertls.Creds
	stream := helloStream{StreamLayer: creds.NewStreamLayer(ln, nil), logger: logging.Discard()}
	defer stream.Close()
	tests := []struct {
		name  string
		dial  func() (net.Conn, error)
		want  error
		bytes string
	}{
		{"this build", func() (net.Conn, error) {
			return stream.Dial(raft.ServerAddress(ln.Addr().String()), 5*time.Second)
		}, nil, "\x00append"},
		{"an older master (no hello)", func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) }, errMasterVersion, "\x00appen"},
		{"the version before", func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) }, errMasterVersion, "TSMR\x02\x00append"},
		{"a later version", func() (net.Conn, error) { return net.Dial("tcp", ln.Addr().String()) }, errMasterVersion, "TSMR\x04\x00append"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write([]byte(tt.bytes)); err != nil {
				t.Fatal(err)
			}
			in, err := stream.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, len(tt.bytes))
			_, err = io.ReadFull(in, buf)
			if !errors.Is(err, tt.want) {
				t.Fatalf("read = %v, want %v", err, tt.want)
			}
			if tt.want == nil && string(buf) != tt.bytes {
				t.Fatalf("read %q, want %q", buf, tt.bytes)
			}
		})
	}
}

// TestHelloAnswered: a dialing master learns whether its hello was
// accepted. AddMember's probe took any connection as a member's, so a
// master of another version (whose acceptor reads the hello and closes)
// was added as a voter that refuses every connection.
func TestHelloAnswered(t *testing.T) {
	var creds *peertls.Creds
	listen := func(t *testing.T) net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	// serve answers every connection of ln as f does.
	serve := func(ln net.Listener, f func(net.Conn)) {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go f(c)
			}
		}()
	}
	thisBuild := func(t *testing.T) net.Listener {
		ln := listen(t)
		stream := helloStream{StreamLayer: creds.NewStreamLayer(ln, nil), logger: logging.Discard()}
		serve(stream, func(c net.Conn) { io.Copy(io.Discard, c) })
		return ln
	}
	otherVersion := func(t *testing.T) net.Listener {
		ln := listen(t)
		serve(ln, func(c net.Conn) { io.ReadFull(c, make([]byte, len(masterHello))); c.Close() })
		return ln
	}
	silent := func(t *testing.T) net.Listener {
		ln := listen(t)
		serve(ln, func(c net.Conn) { io.Copy(io.Discard, c) })
		return ln
	}
	for _, tc := range []struct {
		name    string
		peer    func(*testing.T) net.Listener
		wantErr bool
	}{
		{"a master of this version", thisBuild, false},
		{"a master of another version", otherVersion, true},
		{"a listener that never answers", silent, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln := tc.peer(t)
			dialer := helloStream{StreamLayer: creds.NewStreamLayer(listen(t), nil), logger: logging.Discard()}
			conn, err := dialer.Dial(raft.ServerAddress(ln.Addr().String()), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := awaitHello(conn, 300*time.Millisecond); (err != nil) != tc.wantErr {
				t.Fatalf("awaitHello = %v, want an error: %v", err, tc.wantErr)
			}
		})
	}
}
