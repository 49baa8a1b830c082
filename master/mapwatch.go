package master

import (
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// The partition map reaches the front-ends as one whole map when a watch
// starts and then as deltas: what each change touched, read afresh from
// the state, so that creating N tables costs O(N) map traffic in all
// rather than N whole maps (O(N^2)). Each delta watcher collects the keys
// changed since its last send; a restore from a snapshot (anything may
// have changed) makes it send a whole map again.

// mapWatcher is one WatchPartitionMap stream that takes deltas. Its
// pending changes are guarded by Server.softMu.
type mapWatcher struct {
	pending changeSet
	leaders map[uint64]struct{} // ranges whose reported leader changed
	soft    bool                // servers' liveness, properties or accounts may have changed
	full    bool                // send the whole map next
	wake    chan struct{}       // buffered 1: something is pending
}

// addWatcher registers a delta watcher; everything that changes from now on
// reaches it.
func (s *Server) addWatcher() *mapWatcher {
	w := &mapWatcher{leaders: map[uint64]struct{}{}, wake: make(chan struct{}, 1)}
	s.softMu.Lock()
	s.watchers[w] = struct{}{}
	s.softMu.Unlock()
	return w
}

func (s *Server) removeWatcher(w *mapWatcher) {
	s.softMu.Lock()
	delete(s.watchers, w)
	s.softMu.Unlock()
}

// take returns and clears what is pending for w, with the map version it
// brings w to.
func (s *Server) take(w *mapWatcher) (cs changeSet, leaders map[uint64]struct{}, soft, full bool, version uint64) {
	s.softMu.Lock()
	defer s.softMu.Unlock()
	cs, leaders, soft, full = w.pending, w.leaders, w.soft, w.full
	w.pending, w.leaders, w.soft, w.full = changeSet{}, map[uint64]struct{}{}, false, false
	return cs, leaders, soft, full, s.version
}

// bump records a change of soft state (leaders, liveness) and wakes
// watchers.
func (s *Server) bump() { s.bumpChanges(&changeSet{other: true}) }

// bumpChanges records a change of the map, cs naming what changed (nil:
// anything may have), and wakes watchers.
func (s *Server) bumpChanges(cs *changeSet) {
	s.softMu.Lock()
	defer s.softMu.Unlock()
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
	leaders := s.reports.takeChangedLeaders()
	for w := range s.watchers {
		if cs == nil {
			w.full = true
		} else {
			w.pending.merge(cs)
			w.soft = w.soft || cs.other
		}
		for _, id := range leaders {
			w.leaders[id] = struct{}{}
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// partitionDelta reads what cs and leaders name from the current state.
func (s *Server) partitionDelta(cs changeSet, leaders map[uint64]struct{}, version uint64) *pb.PartitionMap {
	m := &pb.PartitionMap{Delta: true, Version: version, Epoch: s.epoch}
	if leaders == nil {
		leaders = map[uint64]struct{}{}
	}
	seen, spaces := s.reports.seen(), s.reports.spaces()
	now := time.Now()
	clocks := s.reports.clockVerdictsAt(s.cfg.Policy.MaxClockOffset, now)
	live := map[uint64]bool{}
	s.fsm.readIndexed(func(st *state, index uint64) {
		m.Index = index
		for key := range cs.tables {
			if t, ok := st.tables[key]; ok {
				m.Tables = append(m.Tables, t)
			} else {
				m.RemovedTables = append(m.RemovedTables, key)
			}
		}
		for id := range cs.ranges {
			if r, ok := st.ranges[id]; ok {
				m.Ranges = append(m.Ranges, r)
			} else {
				m.RemovedRanges = append(m.RemovedRanges, id)
			}
			leaders[id] = struct{}{}
		}
		for id := range leaders {
			_, live[id] = st.ranges[id]
		}
		s.fillShared(m, st, seen, spaces, clocks, now)
		if cs.props {
			// Only with a change of them: a leader, liveness or table
			// change does not resend every account's document.
			m.AccountServiceProperties, m.AccountServicePropertiesCarried = st.servedProperties(), true
		}
	})
	for id := range leaders {
		l := ""
		if live[id] {
			l = s.reports.leaderOf(id)
		}
		if l == "" {
			m.RemovedLeaders = append(m.RemovedLeaders, id)
			continue
		}
		if m.Leaders == nil {
			m.Leaders = map[uint64]string{}
		}
		m.Leaders[id] = l
	}
	return m
}

// tableDelta is the delta that brings a receiver's view of one table (by
// case-insensitive name) up to date: the table with every range of it and
// their leaders, or the table's name in removed_tables.
//
// The version is read before the table: every change numbered up to it is
// in what is read after (the state changes before its number is taken,
// Server.bumpChanges), so a receiver holding a map at or past that version
// (router: it then skips the delta) already holds this table as new or
// newer, and one holding less loses nothing newer by applying it. Read the
// other way round, a change committed between the two reads would carry a
// version it is not in, and a receiver whose watch had delivered that
// version would undo it. The Raft index (partitionDelta) is read with the
// table itself: it names exactly the state read, for receivers whose map
// came from another master.
func (s *Server) tableDelta(name string) *pb.PartitionMap {
	s.softMu.Lock()
	version := s.version
	s.softMu.Unlock()
	key := strings.ToLower(name)
	var cs changeSet
	cs.table(key)
	s.fsm.read(func(st *state) {
		t, ok := st.tables[key]
		if !ok {
			return
		}
		for _, id := range st.rangesOf(t.GetTableId()) {
			cs.rangeID(id)
		}
	})
	return s.partitionDelta(cs, nil, version)
}

// fillShared adds the parts every map and delta carries whole: the
// servers with their liveness, the primary account's service properties
// and the accounts (the other accounts' properties: partitionMap, and
// partitionDelta with a change of them).
// seen, spaces and clocks are the reports' (taken before the catalog's
// read lock, as everywhere).
func (s *Server) fillShared(m *pb.PartitionMap, st *state, seen map[string]time.Time, spaces map[string]*pb.DiskSpace, clocks map[string]clockVerdict, now time.Time) {
	m.ServiceProperties = st.serviceProperties
	m.PerAccountServiceProperties = true
	m.Accounts = st.accounts
	for _, sv := range st.servers {
		c := proto.Clone(sv).(*pb.ServerInfo)
		if t, ok := seen[sv.GetServerId()]; ok {
			c.LastHeartbeatUnixNano = t.UnixNano()
			c.Alive = s.upAt(seen, sv.GetServerId(), now)
		}
		c.DiskSpace = spaces[sv.GetServerId()]
		c.ClockSkewed, c.ClockOffsetNanos = clocks[sv.GetServerId()].skewed, int64(clocks[sv.GetServerId()].offset)
		m.Servers = append(m.Servers, c)
	}
	sortServers(m.Servers)
}
