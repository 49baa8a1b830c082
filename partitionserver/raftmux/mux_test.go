package raftmux

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/logging"
)

func newMux(t *testing.T) *Mux {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, logging.Discard())
	t.Cleanup(func() { m.Close() })
	return m
}

func TestRoutesByRangeID(t *testing.T) {
	a, b := newMux(t), newMux(t)
	la1, _ := a.Layer(1)
	la2, _ := a.Layer(2)
	lb1, _ := b.Layer(1)
	lb2, _ := b.Layer(2)
	cases := []struct {
		name     string
		from, to *Layer
		msg      string
	}{
		{"range 1", la1, lb1, "one"},
		{"range 2", la2, lb2, "two"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn, err := c.from.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(c.msg)); err != nil {
				t.Fatal(err)
			}
			in, err := c.to.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			buf := make([]byte, len(c.msg))
			if _, err := io.ReadFull(in, buf); err != nil || string(buf) != c.msg {
				t.Fatalf("read %q, %v", buf, err)
			}
		})
	}
}

func TestUnknownRangeIsClosed(t *testing.T) {
	a, b := newMux(t), newMux(t)
	l, _ := a.Layer(9)
	conn, err := l.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection to an unhosted range stayed open")
	}
}

func TestIsolation(t *testing.T) {
	a, b := newMux(t), newMux(t)
	la, _ := a.Layer(1)
	if _, err := b.Layer(1); err != nil {
		t.Fatal(err)
	}
	a.SetIsolated(true)
	if _, err := la.Dial(raft.ServerAddress(b.Addr().String()), time.Second); err == nil {
		t.Fatal("dial succeeded while isolated")
	}
	a.SetIsolated(false)
	conn, err := la.Dial(raft.ServerAddress(b.Addr().String()), time.Second)
	if err != nil {
		t.Fatalf("dial after healing: %v", err)
	}
	conn.Close()
}

func TestDuplicateLayerRefused(t *testing.T) {
	m := newMux(t)
	if _, err := m.Layer(1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Layer(1); err == nil {
		t.Fatal("second layer for the same range accepted")
	}
}
