package master

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/peer"

	"tablestore/internal/metricsbridge"
	pb "tablestore/proto/tablestorepb"
)

// The front-ends make themselves known on their partition map watch
// (WatchPartitionMapRequest.frontend): the master serving a watch keeps
// who is on it while the stream is open, with the map version it last
// sent, and answers ListFrontends from that. Liveness is the open stream:
// no TTL, nothing in Raft. Watches are served by the leader alone, so a
// follower lists none but the watches it has not yet ended after losing
// the leadership; ctl asks every master and merges.

// Bounds of what a front-end may register: its watch is unauthenticated
// beyond the peers' mutual TLS, and ListFrontends returns it all.
const (
	maxFrontendIDLen      = 128
	maxFrontendVersionLen = 256
	maxFrontendHTTPAddrs  = 8
	// maxFrontendAddrLen: a DNS name (253) and a port.
	maxFrontendAddrLen = 253 + len(":65535")
)

// frontendSet is the front-ends watching this master.
type frontendSet struct {
	mu      sync.Mutex
	watches map[*frontendWatch]struct{}
}

// frontendWatch is one open watch that carried a FrontendInfo. Its sent
// fields are guarded by frontendSet.mu.
type frontendWatch struct {
	set       *frontendSet
	info      *pb.FrontendInfo
	peer      string
	connected time.Time
	version   uint64
	lastSend  time.Time
}

func newFrontendSet() *frontendSet {
	return &frontendSet{watches: map[*frontendWatch]struct{}{}}
}

// add registers a watch by info from peer; nil (not listed) when info is
// absent or names no id: an older front-end, served all the same.
func (fs *frontendSet) add(info *pb.FrontendInfo, peer string, now time.Time) *frontendWatch {
	info = checkedFrontend(info, peer)
	if info == nil {
		return nil
	}
	w := &frontendWatch{set: fs, info: info, peer: peer, connected: now}
	fs.mu.Lock()
	fs.watches[w] = struct{}{}
	fs.mu.Unlock()
	return w
}

// remove unregisters w (nil: nothing to do), as its stream ends.
func (fs *frontendSet) remove(w *frontendWatch) {
	if w == nil {
		return
	}
	fs.mu.Lock()
	delete(fs.watches, w)
	fs.mu.Unlock()
}

// sent records that w was sent the map at version (nil w: not listed).
func (w *frontendWatch) sent(version uint64, now time.Time) {
	if w == nil {
		return
	}
	w.set.mu.Lock()
	w.version, w.lastSend = max(w.version, version), now
	w.set.mu.Unlock()
}

// upTo records that w holds everything up to version though nothing was
// sent (no change of what it was pending concerned it).
func (w *frontendWatch) upTo(version uint64) {
	if w == nil {
		return
	}
	w.set.mu.Lock()
	w.version = max(w.version, version)
	w.set.mu.Unlock()
}

// list returns the watches, by front-end id then connection time.
func (fs *frontendSet) list() []*pb.WatchingFrontend {
	fs.mu.Lock()
	out := make([]*pb.WatchingFrontend, 0, len(fs.watches))
	for w := range fs.watches {
		f := &pb.WatchingFrontend{Frontend: w.info, PeerAddr: w.peer,
			ConnectedUnixNano: w.connected.UnixNano(), MapVersionSent: w.version}
		if !w.lastSend.IsZero() {
			f.LastSendUnixNano = w.lastSend.UnixNano()
		}
		out = append(out, f)
	}
	fs.mu.Unlock()
	slices.SortFunc(out, func(a, b *pb.WatchingFrontend) int {
		if c := strings.Compare(a.GetFrontend().GetId(), b.GetFrontend().GetId()); c != 0 {
			return c
		}
		return cmp.Compare(a.GetConnectedUnixNano(), b.GetConnectedUnixNano())
	})
	return out
}

// checkedFrontend is info as ListFrontends shows it: nil without an id (or
// with one too long), listener addresses that are not host:port dropped
// (ctl builds URLs of them, as of a partition server's), those bound to
// every interface advertised with peer's host, strings bounded. Pure.
func checkedFrontend(info *pb.FrontendInfo, peer string) *pb.FrontendInfo {
	if info.GetId() == "" || len(info.GetId()) > maxFrontendIDLen {
		return nil
	}
	// Built field by field, not cloned: a clone keeps unknown fields,
	// held for the stream's life and returned by every ListFrontends.
	c := &pb.FrontendInfo{Id: info.GetId(), StartUnixNano: info.GetStartUnixNano()}
	advertise := func(addr string) string {
		if addr = metricsbridge.Advertised(addr, peer); len(addr) > maxFrontendAddrLen || !metricsbridge.ListenerAddr(addr) {
			return ""
		}
		return addr
	}
	c.MetricsAddr, c.PprofAddr = advertise(info.GetMetricsAddr()), advertise(info.GetPprofAddr())
	for _, a := range info.GetHttpAddrs() {
		if a = advertise(a); a != "" && len(c.HttpAddrs) < maxFrontendHTTPAddrs {
			c.HttpAddrs = append(c.HttpAddrs, a)
		}
	}
	c.Version = info.GetVersion()
	if len(c.Version) > maxFrontendVersionLen {
		// Cut at a character's start: a proto3 string that is not valid
		// UTF-8 fails the marshal of every ListFrontends answer.
		n := maxFrontendVersionLen
		for n > 0 && !utf8.RuneStart(c.Version[n]) {
			n--
		}
		c.Version = c.Version[:n]
	}
	return c
}

// peerAddr is the address a stream came from ("" when unknown).
func peerAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// ListFrontends answers with the front-ends watching this master, leader
// or not (see above).
func (v *service) ListFrontends(_ context.Context, _ *pb.ListFrontendsRequest) (*pb.ListFrontendsResponse, error) {
	s := v.s
	s.softMu.Lock()
	version := s.version
	s.softMu.Unlock()
	return &pb.ListFrontendsResponse{Frontends: s.frontends.list(), SelfId: s.cfg.ID, Leader: s.IsLeader(),
		MapVersion: version, MapEpoch: s.epoch}, nil
}
