package chaos

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// faultNet is the network fault layer: every listener of every role is
// reached through a TCP proxy, and a proxy learns which role opened each
// connection (the owner of the client socket, from /proc), so the harness
// can cut any directed pair of roles: "a cannot reach b" refuses and closes
// the connections a opens to b (connections b opened to a keep working,
// as with an asymmetric firewall rule).
type faultNet struct {
	mu      sync.Mutex
	cut     map[[2]string]bool // {from, to}
	pids    map[int]string     // live process id -> role name
	proxies []*proxy
	refused atomic.Int64
}

func newFaultNet() *faultNet {
	return &faultNet{cut: map[[2]string]bool{}, pids: map[int]string{}}
}

// proxy forwards one role's listener.
type proxy struct {
	n      *faultNet
	to     string // role name behind it
	target string
	ln     net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]string // client side -> source role
}

// listen starts a proxy in front of target for role to.
func (n *faultNet) listen(to, target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{n: n, to: to, target: target, ln: ln, conns: map[net.Conn]string{}}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	go p.serve()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *proxy) handle(c net.Conn) {
	from := p.n.source(c)
	if p.n.isCut(from, p.to) {
		p.n.refused.Add(1)
		c.Close()
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c] = from
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (n *faultNet) isCut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[[2]string{from, to}]
}

// setCut makes from unable (true) or able (false) to reach to, closing
// what from has open to to.
func (n *faultNet) setCut(from, to string, v bool) {
	n.mu.Lock()
	if v {
		n.cut[[2]string{from, to}] = true
	} else {
		delete(n.cut, [2]string{from, to})
	}
	proxies := append([]*proxy(nil), n.proxies...)
	n.mu.Unlock()
	if !v {
		return
	}
	for _, p := range proxies {
		if p.to != to {
			continue
		}
		p.mu.Lock()
		for c, src := range p.conns {
			if src == from {
				n.refused.Add(1)
				c.Close()
			}
		}
		p.mu.Unlock()
	}
}

// heal removes every cut.
func (n *faultNet) heal() {
	n.mu.Lock()
	n.cut = map[[2]string]bool{}
	n.mu.Unlock()
}

func (n *faultNet) setPID(pid int, role string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for p, r := range n.pids {
		if r == role {
			delete(n.pids, p)
		}
	}
	if pid > 0 {
		n.pids[pid] = role
	}
}

// source names the role that opened c: the process holding the socket
// whose local address is c's remote address ("" if none of ours).
func (n *faultNet) source(c net.Conn) string {
	ra, ok1 := c.RemoteAddr().(*net.TCPAddr)
	la, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	inode := socketInode(ra.Port, la.Port)
	if inode == "" {
		return ""
	}
	n.mu.Lock()
	pids := make(map[int]string, len(n.pids))
	for p, r := range n.pids {
		pids[p] = r
	}
	n.mu.Unlock()
	want := "socket:[" + inode + "]"
	for pid, role := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
				return role
			}
		}
	}
	return ""
}

// socketInode finds in /proc/net/tcp the inode of the socket bound to
// 127.0.0.1:local and connected to port remote.
func socketInode(local, remote int) string {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	wantL := fmt.Sprintf(":%04X", local)
	wantR := fmt.Sprintf(":%04X", remote)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !strings.HasSuffix(fs[1], wantL) || !strings.HasSuffix(fs[2], wantR) {
			continue
		}
		if _, err := strconv.Atoi(fs[9]); err == nil {
			return fs[9]
		}
	}
	return ""
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
