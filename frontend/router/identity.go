package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// A front-end tells the master serving its partition map watch who it is
// (WatchPartitionMapRequest.frontend), so that `tablestore ctl frontends`
// and `ctl debug zip` find it: the master lists the front-ends whose
// watches are open on it. A front-end whose HTTP port is chosen at bind
// time (port 0) learns its address after the router started; a watch
// already open then starts over to carry it (one whole map more for that
// start; cluster.frontendIdentity names a fixed port before the start).

// identity is what the router's watches say about the front-end.
type identity struct {
	id string

	mu   sync.Mutex
	info *pb.FrontendInfo // nil until SetIdentity
	// cancel ends the open watch (nil when none is open); restarted: it
	// was ended by SetIdentity.
	cancel    context.CancelFunc
	restarted bool
}

// newFrontendID is a front-end id: the host name and random hex, unique
// per router (one per front-end process, several in `tablestore dev`).
func newFrontendID() string {
	var b [6]byte
	rand.Read(b[:])
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "frontend"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	return host + "-" + hex.EncodeToString(b[:])
}

// open records the cancel of a watch about to open and returns what it
// tells the master (nil before SetIdentity: the watch is not listed).
func (id *identity) open(cancel context.CancelFunc) *pb.FrontendInfo {
	id.mu.Lock()
	defer id.mu.Unlock()
	id.cancel, id.restarted = cancel, false
	return id.info
}

// close records that the watch ended; true when SetIdentity ended it.
func (id *identity) close() (restarted bool) {
	id.mu.Lock()
	defer id.mu.Unlock()
	restarted = id.restarted
	id.cancel, id.restarted = nil, false
	return restarted
}

// ID is this front-end's id, the same on all its watches.
func (r *Router) ID() string { return r.ident.id }

// SetIdentity sets what the watches tell the master about this front-end
// (its id is the router's, ID); a watch already open starts over to tell
// it.
func (r *Router) SetIdentity(info *pb.FrontendInfo) {
	if info == nil {
		info = &pb.FrontendInfo{}
	}
	info = proto.Clone(info).(*pb.FrontendInfo)
	info.Id = r.ident.id
	r.ident.mu.Lock()
	defer r.ident.mu.Unlock()
	if proto.Equal(info, r.ident.info) {
		return
	}
	r.ident.info = info
	if r.ident.cancel != nil {
		r.ident.restarted = true
		r.ident.cancel()
	}
}
