package master

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// Errors of the master state machine.
var (
	ErrTableExists    = errors.New("master: table already exists")
	ErrTableNotFound  = errors.New("master: table not found")
	ErrBadCommand     = errors.New("master: malformed command")
	ErrUnknownCommand = errors.New("master: unknown command kind")
	ErrUnknownServer  = errors.New("master: no such partition server")
)

// applyResult is returned through raft's ApplyFuture.Response.
type applyResult struct {
	table   *pb.Table
	ranges  []*pb.RangeDescriptor
	rangeID uint64
	err     error
}

type handler func(s *state, payload []byte) *applyResult

var handlers = map[pb.MasterCommandKind]handler{}

func register(kind pb.MasterCommandKind, h handler) {
	if _, dup := handlers[kind]; dup {
		panic(fmt.Sprintf("master: handler for %v registered twice", kind))
	}
	handlers[kind] = h
}

func init() {
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, applyRegisterServer)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE, applyCreateTable)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE, applyDeleteTable)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_TABLE_ACL, applySetTableACL)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVICE_PROPERTIES, applySetServiceProperties)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, applyUpdateRanges)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_ALLOCATE_RANGE_ID, applyAllocateRangeID)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_APPEND_EVENT, applyAppendEvent)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_RANGE, applyRemoveRange)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVER_DRAINING, applySetServerDraining)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS, applySetAccounts)
}

// state is the replicated state. Tables are keyed by lower-case name
// because Azure table names are case-insensitive.
type state struct {
	tables      map[string]*pb.Table
	ranges      map[uint64]*pb.RangeDescriptor
	servers     map[string]*pb.ServerInfo
	nextTableID uint64
	nextRangeID uint64
	// serviceProperties is the XML document of Set Table Service Properties.
	serviceProperties []byte
	// accounts are the storage accounts the front-ends serve; empty: each
	// serves its configured account.
	accounts []*pb.StorageAccount
	// events is the most recent part of the event log, oldest first.
	events       []*pb.Event
	nextEventSeq uint64
}

// maxEvents bounds the replicated event log.
const maxEvents = 2000

func newState() *state {
	return &state{
		tables: map[string]*pb.Table{}, ranges: map[uint64]*pb.RangeDescriptor{},
		servers: map[string]*pb.ServerInfo{}, nextTableID: 1, nextRangeID: 1, nextEventSeq: 1,
	}
}

func (s *state) snapshot() *pb.MasterSnapshot {
	out := &pb.MasterSnapshot{
		NextTableId: s.nextTableID, NextRangeId: s.nextRangeID, ServiceProperties: s.serviceProperties,
		Events: s.events, NextEventSeq: s.nextEventSeq, Accounts: s.accounts,
	}
	for _, t := range s.tables {
		out.Tables = append(out.Tables, t)
	}
	for _, r := range s.ranges {
		out.Ranges = append(out.Ranges, r)
	}
	for _, sv := range s.servers {
		out.Servers = append(out.Servers, sv)
	}
	sort.Slice(out.Tables, func(i, j int) bool { return out.Tables[i].GetTableId() < out.Tables[j].GetTableId() })
	sort.Slice(out.Ranges, func(i, j int) bool { return out.Ranges[i].GetRangeId() < out.Ranges[j].GetRangeId() })
	sort.Slice(out.Servers, func(i, j int) bool { return out.Servers[i].GetServerId() < out.Servers[j].GetServerId() })
	return out
}

func stateFromSnapshot(m *pb.MasterSnapshot) *state {
	s := newState()
	for _, t := range m.GetTables() {
		s.tables[strings.ToLower(t.GetName())] = t
	}
	for _, r := range m.GetRanges() {
		s.ranges[r.GetRangeId()] = r
	}
	for _, sv := range m.GetServers() {
		s.servers[sv.GetServerId()] = sv
	}
	s.nextTableID, s.nextRangeID = m.GetNextTableId(), m.GetNextRangeId()
	s.serviceProperties = m.GetServiceProperties()
	s.accounts = m.GetAccounts()
	s.events = m.GetEvents()
	if m.GetNextEventSeq() > 0 {
		s.nextEventSeq = m.GetNextEventSeq()
	}
	return s
}

func applyRegisterServer(s *state, payload []byte) *applyResult {
	var c pb.RegisterServerCommand
	if err := proto.Unmarshal(payload, &c); err != nil || c.GetServer().GetServerId() == "" {
		return &applyResult{err: ErrBadCommand}
	}
	sv := c.GetServer()
	// Re-registering (a new address) keeps the operator's drain mark.
	draining := s.servers[sv.GetServerId()].GetDraining()
	s.servers[sv.GetServerId()] = &pb.ServerInfo{ServerId: sv.GetServerId(), GrpcAddr: sv.GetGrpcAddr(), RaftAddr: sv.GetRaftAddr(), Draining: draining}
	return &applyResult{}
}

// applySetServerDraining sets or clears a server's drain mark.
func applySetServerDraining(s *state, payload []byte) *applyResult {
	var c pb.SetServerDrainingCommand
	if err := proto.Unmarshal(payload, &c); err != nil || c.GetServerId() == "" {
		return &applyResult{err: ErrBadCommand}
	}
	sv, ok := s.servers[c.GetServerId()]
	if !ok {
		return &applyResult{err: fmt.Errorf("%w: %q", ErrUnknownServer, c.GetServerId())}
	}
	c2 := proto.Clone(sv).(*pb.ServerInfo)
	c2.Draining = c.GetDraining()
	s.servers[c.GetServerId()] = c2
	return &applyResult{}
}

func applyCreateTable(s *state, payload []byte) *applyResult {
	var c pb.CreateTableCommand
	if err := proto.Unmarshal(payload, &c); err != nil || c.GetName() == "" {
		return &applyResult{err: ErrBadCommand}
	}
	key := strings.ToLower(c.GetName())
	if _, ok := s.tables[key]; ok {
		return &applyResult{err: ErrTableExists}
	}
	t := &pb.Table{Name: c.GetName(), TableId: s.nextTableID, CreatedUnixNano: c.GetCreatedUnixNano()}
	s.nextTableID++
	r := &pb.RangeDescriptor{
		RangeId: s.nextRangeID, Table: t.GetName(), TableId: t.GetTableId(),
		Generation: 1, Replicas: c.GetReplicas(),
	}
	s.nextRangeID++
	s.tables[key] = t
	s.ranges[r.GetRangeId()] = r
	return &applyResult{table: t, ranges: []*pb.RangeDescriptor{r}}
}

func applyDeleteTable(s *state, payload []byte) *applyResult {
	var c pb.DeleteTableCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	key := strings.ToLower(c.GetName())
	t, ok := s.tables[key]
	if !ok {
		return &applyResult{err: ErrTableNotFound}
	}
	delete(s.tables, key)
	var gone []*pb.RangeDescriptor
	for id, r := range s.ranges {
		if r.GetTableId() == t.GetTableId() {
			gone = append(gone, r)
			delete(s.ranges, id)
		}
	}
	return &applyResult{table: t, ranges: gone}
}

func applySetTableACL(s *state, payload []byte) *applyResult {
	var c pb.SetTableACLCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	t, ok := s.tables[strings.ToLower(c.GetName())]
	if !ok {
		return &applyResult{err: ErrTableNotFound}
	}
	// Tables are shared with readers of earlier snapshots; replace, never
	// mutate.
	nt := proto.Clone(t).(*pb.Table)
	nt.Acl = c.GetAcl()
	s.tables[strings.ToLower(c.GetName())] = nt
	return &applyResult{table: nt}
}

func applySetServiceProperties(s *state, payload []byte) *applyResult {
	var c pb.SetServicePropertiesCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	s.serviceProperties = c.GetProperties()
	return &applyResult{}
}

func applySetAccounts(s *state, payload []byte) *applyResult {
	var c pb.SetAccountsCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	// The slice is shared with readers of earlier snapshots: replace it.
	s.accounts = c.GetAccounts()
	return &applyResult{}
}

// applyUpdateRanges stores descriptors that are newer (higher generation)
// than what the map holds, and drops older ranges of the same table that a
// newer descriptor overlaps: the ranges' own Raft state is the truth, and
// the highest generation is the latest of it.
func applyUpdateRanges(s *state, payload []byte) *applyResult {
	var c pb.UpdateRangesCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	var changed []*pb.RangeDescriptor
	for _, d := range c.GetRanges() {
		if !s.tableLive(d.GetTableId()) {
			continue
		}
		if old, ok := s.ranges[d.GetRangeId()]; ok && old.GetGeneration() >= d.GetGeneration() {
			continue
		}
		if s.coveredByNewer(d) {
			// A range a merge already absorbed, reported late.
			continue
		}
		for id, o := range s.ranges {
			if id != d.GetRangeId() && o.GetTableId() == d.GetTableId() && overlaps(o, d) && o.GetGeneration() < d.GetGeneration() {
				delete(s.ranges, id)
			}
		}
		s.ranges[d.GetRangeId()] = d
		if d.GetRangeId() >= s.nextRangeID {
			s.nextRangeID = d.GetRangeId() + 1
		}
		changed = append(changed, d)
	}
	return &applyResult{ranges: changed}
}

// coveredByNewer reports whether another range of the table overlapping d
// has a generation at least as high: d is stale.
func (s *state) coveredByNewer(d *pb.RangeDescriptor) bool {
	for id, o := range s.ranges {
		if id != d.GetRangeId() && o.GetTableId() == d.GetTableId() && overlaps(o, d) && o.GetGeneration() >= d.GetGeneration() {
			return true
		}
	}
	return false
}

func (s *state) tableLive(id uint64) bool {
	for _, t := range s.tables {
		if t.GetTableId() == id {
			return true
		}
	}
	return false
}

// overlaps reports whether two ranges of a table share a PartitionKey.
func overlaps(a, b *pb.RangeDescriptor) bool {
	aEndsBeforeB := a.GetEnd() != "" && a.GetEnd() <= b.GetStart()
	bEndsBeforeA := b.GetEnd() != "" && b.GetEnd() <= a.GetStart()
	return !aEndsBeforeB && !bEndsBeforeA
}

func applyAllocateRangeID(s *state, payload []byte) *applyResult {
	id := s.nextRangeID
	s.nextRangeID++
	return &applyResult{rangeID: id}
}

func applyAppendEvent(s *state, payload []byte) *applyResult {
	var c pb.AppendEventCommand
	if err := proto.Unmarshal(payload, &c); err != nil || c.GetEvent() == nil {
		return &applyResult{err: ErrBadCommand}
	}
	e := c.GetEvent()
	e.Seq = s.nextEventSeq
	s.nextEventSeq++
	s.events = append(s.events, e)
	if len(s.events) > maxEvents {
		s.events = append([]*pb.Event(nil), s.events[len(s.events)-maxEvents:]...)
	}
	return &applyResult{}
}

// applyRemoveRange retires a range absorbed by its left neighbour.
func applyRemoveRange(s *state, payload []byte) *applyResult {
	var c pb.RemoveRangeCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	delete(s.ranges, c.GetRangeId())
	if l := c.GetAbsorbedBy(); l != nil {
		if old, ok := s.ranges[l.GetRangeId()]; !ok || old.GetGeneration() < l.GetGeneration() {
			if s.tableLive(l.GetTableId()) {
				s.ranges[l.GetRangeId()] = l
			}
		}
	}
	return &applyResult{}
}

// fsm is the master's raft.FSM; onChange runs after every applied command.
type fsm struct {
	mu       sync.RWMutex
	st       *state
	onChange func()
}

func (f *fsm) Apply(l *raft.Log) interface{} {
	var cmd pb.MasterCommand
	if err := proto.Unmarshal(l.Data, &cmd); err != nil {
		return &applyResult{err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	h, ok := handlers[cmd.GetKind()]
	if !ok {
		return &applyResult{err: fmt.Errorf("%w: %v", ErrUnknownCommand, cmd.GetKind())}
	}
	f.mu.Lock()
	res := h(f.st, cmd.GetPayload())
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange()
	}
	return res
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := proto.Marshal(f.st.snapshot())
	if err != nil {
		return nil, err
	}
	return snapshotBytes(b), nil
}

func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	var m pb.MasterSnapshot
	if err := proto.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("master: corrupt snapshot: %w", err)
	}
	f.mu.Lock()
	f.st = stateFromSnapshot(&m)
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange()
	}
	return nil
}

// read runs fn under the state's read lock.
func (f *fsm) read(fn func(s *state)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

type snapshotBytes []byte

func (b snapshotBytes) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(b); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshotBytes) Release() {}

func encodeCommand(kind pb.MasterCommandKind, m proto.Message) ([]byte, error) {
	payload, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(&pb.MasterCommand{Kind: kind, Payload: payload})
}
