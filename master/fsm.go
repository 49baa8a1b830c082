package master

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
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
	// decision is the merge decision recorded for the freeze a
	// MERGE_DECISION command named (see applyMergeDecision).
	decision *pb.MergeDecision
	// recorded: the command recorded its decision (not one in force
	// already).
	recorded bool
	// replayed: a table command answered from its request's record
	// (another attempt of the same request applied it): nothing was done
	// now, so its caller neither starts nor announces anything anew.
	replayed bool
	err      error
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
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNT_SERVICE_PROPERTIES, applySetServiceProperties)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, applyUpdateRanges)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_ALLOCATE_RANGE_ID, applyAllocateRangeID)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_APPEND_EVENT, applyAppendEvent)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_RANGE, applyRemoveRange)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVER_DRAINING, applySetServerDraining)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_REMOVE_SERVER, applyRemoveServer)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS, applySetAccounts)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_MERGE_DECISION, applyMergeDecision)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_MARK_RANGES_STARTED, applyMarkRangesStarted)
	register(pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETED_RANGES_FROZEN, applyDeletedRangesFrozen)
}

// state is the replicated state. Tables are keyed by lower-case name
// because Azure table names are case-insensitive.
type state struct {
	tables   map[string]*pb.Table
	tableIDs map[uint64]struct{} // the live tables' ids
	ranges   map[uint64]*pb.RangeDescriptor
	// Indexes of ranges, kept by putRange and dropRange: the ranges of each
	// table, the ranges (spans) of each Raft group (rangegroup.GroupOf:
	// a range whose group_id is 0 under its own id), and how many
	// replicas each server holds (for placement).
	tableRanges  map[uint64]map[uint64]struct{}
	groupSpans   map[uint64]map[uint64]struct{}
	replicaCount map[string]int
	servers      map[string]*pb.ServerInfo
	nextTableID  uint64
	nextRangeID  uint64
	// serviceProperties is the XML document of Set Table Service
	// Properties of the front-ends' primary account (--account-name): the
	// one document kept before properties were per account, which is why
	// it keeps its place (old entries and snapshots name no account).
	serviceProperties []byte
	// accountProperties are the other accounts' documents, by account
	// name. Replaced, never mutated (shared with snapshots and maps).
	accountProperties map[string][]byte
	// accounts are the storage accounts the front-ends serve; empty: each
	// serves its configured account.
	accounts []*pb.StorageAccount
	// events is the most recent part of the event log, oldest first.
	events       []*pb.Event
	nextEventSeq uint64
	// requests are the outcomes of the last maxRequests table commands that
	// carried a request id, oldest first, and byID indexes them.
	requests []*pb.TableRequestRecord
	byID     map[string]*pb.TableRequestRecord
	// mergeDecisions is the latest merge decision of each range that has
	// one, by the right range's id (mergedecision.go); dropped with the
	// range.
	mergeDecisions map[uint64]*pb.MergeDecision
	// started holds the ranges at generation 1 that have started (a
	// leader was seen): a replica of one that a server lacks is
	// re-created with a join floor, never by bootstrapping
	// (rangestart.go). Dropped with the table; a range that leaves
	// generation 1 keeps its mark (it no longer matters).
	started map[uint64]struct{}
	// deletedPending are the deleted tables, by table id, whose ranges
	// are not yet confirmed frozen (set by DeleteTable, cleared by
	// DELETED_RANGES_FROZEN): any leader freezes them (resumeDeletions)
	// and refuses a create of the name meanwhile (nameFree). Replaced,
	// never mutated (shared with snapshots).
	deletedPending map[uint64]*pb.DeletedTable

	// changes, when set, collects what the command being applied touched
	// (for the partition map's deltas); not replicated.
	changes *changeSet
}

// maxRequests bounds the table request records: at 100 creates a second
// they cover the last ~160 s, far beyond an SDK's retries of one request.
const maxRequests = 16384

// maxEvents bounds the replicated event log.
const maxEvents = 2000

func newState() *state {
	return &state{
		tables: map[string]*pb.Table{}, tableIDs: map[uint64]struct{}{}, ranges: map[uint64]*pb.RangeDescriptor{},
		tableRanges: map[uint64]map[uint64]struct{}{}, groupSpans: map[uint64]map[uint64]struct{}{}, replicaCount: map[string]int{},
		servers: map[string]*pb.ServerInfo{}, nextTableID: 1, nextRangeID: 1, nextEventSeq: 1,
		byID: map[string]*pb.TableRequestRecord{}, mergeDecisions: map[uint64]*pb.MergeDecision{},
		started: map[uint64]struct{}{}, deletedPending: map[uint64]*pb.DeletedTable{},
	}
}

// changeSet names the tables (lower-case) and ranges a command touched;
// other is set when it changed what every map carries whole (servers,
// service properties, accounts).
type changeSet struct {
	tables map[string]struct{}
	ranges map[uint64]struct{}
	other  bool
	// props: the accounts' service properties as the map carries them
	// changed (a document, or the registry that selects them), so a
	// delta carries them (most "other" changes, the servers' liveness
	// and leaders among them, leave them as they were).
	props bool
}

func (c *changeSet) table(key string) {
	if c.tables == nil {
		c.tables = map[string]struct{}{}
	}
	c.tables[key] = struct{}{}
}

func (c *changeSet) rangeID(id uint64) {
	if c.ranges == nil {
		c.ranges = map[uint64]struct{}{}
	}
	c.ranges[id] = struct{}{}
}

// merge adds o's changes to c.
func (c *changeSet) merge(o *changeSet) {
	for k := range o.tables {
		c.table(k)
	}
	for id := range o.ranges {
		c.rangeID(id)
	}
	c.other = c.other || o.other
	c.props = c.props || o.props
}

// Every change to tables and ranges goes through these, so that the
// partition map's deltas see it.

func (s *state) putTable(key string, t *pb.Table) {
	s.tables[key] = t
	s.tableIDs[t.GetTableId()] = struct{}{}
	if s.changes != nil {
		s.changes.table(key)
	}
}

func (s *state) dropTable(key string) {
	if t, ok := s.tables[key]; ok {
		delete(s.tableIDs, t.GetTableId())
	}
	delete(s.tables, key)
	if s.changes != nil {
		s.changes.table(key)
	}
}

func (s *state) putRange(r *pb.RangeDescriptor) {
	s.unindexRange(r.GetRangeId())
	s.ranges[r.GetRangeId()] = r
	addToIndex(s.tableRanges, r.GetTableId(), r.GetRangeId())
	addToIndex(s.groupSpans, rangegroup.GroupOf(r), r.GetRangeId())
	for _, rep := range r.GetReplicas() {
		s.replicaCount[rep.GetServerId()]++
	}
	if s.changes != nil {
		s.changes.rangeID(r.GetRangeId())
	}
}

func (s *state) dropRange(id uint64) {
	s.unindexRange(id)
	delete(s.ranges, id)
	delete(s.mergeDecisions, id)
	if s.changes != nil {
		s.changes.rangeID(id)
	}
}

// changedOther notes a change of what every map carries whole.
func (s *state) changedOther() {
	if s.changes != nil {
		s.changes.other = true
	}
}

func (s *state) changedProps() {
	if s.changes != nil {
		s.changes.props = true
	}
}

// unindexRange removes a range from the indexes (before it is replaced or
// dropped).
func (s *state) unindexRange(id uint64) {
	old, ok := s.ranges[id]
	if !ok {
		return
	}
	removeFromIndex(s.tableRanges, old.GetTableId(), id)
	removeFromIndex(s.groupSpans, rangegroup.GroupOf(old), id)
	for _, rep := range old.GetReplicas() {
		if s.replicaCount[rep.GetServerId()]--; s.replicaCount[rep.GetServerId()] <= 0 {
			delete(s.replicaCount, rep.GetServerId())
		}
	}
}

// addToIndex adds range id to index's set under key.
func addToIndex(index map[uint64]map[uint64]struct{}, key, id uint64) {
	ids := index[key]
	if ids == nil {
		ids = map[uint64]struct{}{}
		index[key] = ids
	}
	ids[id] = struct{}{}
}

// removeFromIndex removes range id from index's set under key, and the
// set once empty.
func removeFromIndex(index map[uint64]map[uint64]struct{}, key, id uint64) {
	if ids := index[key]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(index, key)
		}
	}
}

// groupRanges returns the ids of the ranges the map says Raft group
// group serves, in id order; none for a group it does not know.
func (s *state) groupRanges(group uint64) []uint64 {
	out := make([]uint64, 0, len(s.groupSpans[group]))
	for id := range s.groupSpans[group] {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// rangesOf returns the ids of a table's ranges.
func (s *state) rangesOf(tableID uint64) []uint64 {
	out := make([]uint64, 0, len(s.tableRanges[tableID]))
	for id := range s.tableRanges[tableID] {
		out = append(out, id)
	}
	return out
}

// requestKey is the index of a table request record: the id, the command
// and the table, so a client that reuses an id for another table or
// command gets a new request.
func requestKey(id []byte, kind pb.MasterCommandKind, name string) string {
	return fmt.Sprintf("%x/%d/%s", id, kind, strings.ToLower(name))
}

// request returns the recorded outcome of a table request, if any.
func (s *state) request(id []byte, kind pb.MasterCommandKind, name string) (*pb.TableRequestRecord, bool) {
	if len(id) == 0 {
		return nil, false
	}
	r, ok := s.byID[requestKey(id, kind, name)]
	return r, ok
}

// record keeps a table request's outcome, forgetting the oldest beyond
// maxRequests (the same on every replica: the order is the log's).
func (s *state) record(id []byte, kind pb.MasterCommandKind, name string, res *applyResult) {
	if len(id) == 0 {
		return
	}
	r := &pb.TableRequestRecord{RequestId: id, Kind: kind, Name: strings.ToLower(name), Table: res.table, Ranges: res.ranges}
	switch {
	case errors.Is(res.err, ErrTableExists):
		r.Error = recordExists
	case errors.Is(res.err, ErrTableNotFound):
		r.Error = recordNotFound
	case errors.Is(res.err, ErrTableBeingDeleted):
		r.Error = recordBeingDeleted
	case res.err != nil:
		return // malformed: nothing happened that a retry must see
	}
	s.addRecord(r)
}

func (s *state) addRecord(r *pb.TableRequestRecord) {
	s.requests = append(s.requests, r)
	s.byID[requestKey(r.GetRequestId(), r.GetKind(), r.GetName())] = r
	if len(s.requests) > maxRequests {
		old := s.requests[0]
		if k := requestKey(old.GetRequestId(), old.GetKind(), old.GetName()); s.byID[k] == old {
			delete(s.byID, k)
		}
		s.requests[0] = nil
		s.requests = s.requests[1:]
	}
}

// The recorded errors of TableRequestRecord.error.
const (
	recordExists       = "exists"
	recordNotFound     = "not_found"
	recordBeingDeleted = "being_deleted"
)

// replay is a recorded outcome as the command's result.
func replay(r *pb.TableRequestRecord) *applyResult {
	res := &applyResult{table: r.GetTable(), ranges: r.GetRanges(), replayed: true}
	switch r.GetError() {
	case recordExists:
		res.err = ErrTableExists
	case recordNotFound:
		res.err = ErrTableNotFound
	case recordBeingDeleted:
		res.err = ErrTableBeingDeleted
	}
	return res
}

func (s *state) snapshot() *pb.MasterSnapshot {
	out := &pb.MasterSnapshot{
		NextTableId: s.nextTableID, NextRangeId: s.nextRangeID, ServiceProperties: s.serviceProperties,
		Events: s.events, NextEventSeq: s.nextEventSeq, Accounts: s.accounts, Requests: s.requests,
		StartedRangeIds: s.startedIDs(),
	}
	out.AccountServiceProperties = s.accountProperties
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
	for _, d := range s.mergeDecisions {
		out.MergeDecisions = append(out.MergeDecisions, d)
	}
	sort.Slice(out.MergeDecisions, func(i, j int) bool {
		return out.MergeDecisions[i].GetRightRangeId() < out.MergeDecisions[j].GetRightRangeId()
	})
	for _, d := range s.deletedPending {
		out.DeletedPending = append(out.DeletedPending, d)
	}
	sort.Slice(out.DeletedPending, func(i, j int) bool {
		return out.DeletedPending[i].GetTableId() < out.DeletedPending[j].GetTableId()
	})
	return out
}

func stateFromSnapshot(m *pb.MasterSnapshot) *state {
	s := newState()
	for _, t := range m.GetTables() {
		s.putTable(strings.ToLower(t.GetName()), t)
	}
	for _, r := range m.GetRanges() {
		s.putRange(r)
	}
	for _, sv := range m.GetServers() {
		s.servers[sv.GetServerId()] = sv
	}
	s.nextTableID, s.nextRangeID = m.GetNextTableId(), m.GetNextRangeId()
	s.serviceProperties = m.GetServiceProperties()
	s.accountProperties = m.GetAccountServiceProperties()
	s.accounts = m.GetAccounts()
	s.events = m.GetEvents()
	if m.GetNextEventSeq() > 0 {
		s.nextEventSeq = m.GetNextEventSeq()
	}
	for _, r := range m.GetRequests() {
		s.addRecord(r)
	}
	for _, d := range m.GetMergeDecisions() {
		s.mergeDecisions[d.GetRightRangeId()] = d
	}
	for _, id := range m.GetStartedRangeIds() {
		s.started[id] = struct{}{}
	}
	for _, d := range m.GetDeletedPending() {
		s.deletedPending[d.GetTableId()] = d
	}
	return s
}

func applyRegisterServer(s *state, payload []byte) *applyResult {
	var c pb.RegisterServerCommand
	if err := proto.Unmarshal(payload, &c); err != nil || c.GetServer().GetServerId() == "" {
		return &applyResult{err: ErrBadCommand}
	}
	sv := c.GetServer()
	// Re-registering (a new address or zone) keeps the operator's drain
	// mark.
	draining := s.servers[sv.GetServerId()].GetDraining()
	s.servers[sv.GetServerId()] = &pb.ServerInfo{ServerId: sv.GetServerId(), GrpcAddr: sv.GetGrpcAddr(), RaftAddr: sv.GetRaftAddr(),
		Zone: sv.GetZone(), Draining: draining, MetricsAddr: sv.GetMetricsAddr(), PprofAddr: sv.GetPprofAddr()}
	s.changedOther()
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
	s.changedOther()
	return &applyResult{}
}

func applyCreateTable(s *state, payload []byte) *applyResult {
	var c pb.CreateTableCommand
	if err := proto.Unmarshal(payload, &c); err != nil || (c.GetName() == "" && !c.GetAnchor()) {
		return &applyResult{err: ErrBadCommand}
	}
	if c.GetAnchor() {
		return createAnchor(s, &c)
	}
	if reservedName(c.GetName()) {
		return &applyResult{err: fmt.Errorf("%w: %q", ErrReservedName, c.GetName())}
	}
	kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
	if r, ok := s.request(c.GetRequestId(), kind, c.GetName()); ok {
		return replay(r)
	}
	res := createTable(s, &c)
	s.record(c.GetRequestId(), kind, c.GetName(), res)
	return res
}

func createTable(s *state, c *pb.CreateTableCommand) *applyResult {
	key := strings.ToLower(c.GetName())
	_, exists := s.tables[key]
	// Decided here, on every master alike, not only by the proposer's
	// check before the command: another create and a delete of the name
	// may commit in between. Only tables from the proposer's check on:
	// the rest of the pending list may differ between masters (see
	// CreateTableCommand.refuse_deleted_since). Before anything is
	// allocated: a refused create consumes no id.
	since := c.GetRefuseDeletedSince()
	pending := since != 0 && s.deletePendingName(c.GetName(), since)
	if err := nameFree(exists, pending); err != nil {
		return &applyResult{err: err}
	}
	t := &pb.Table{Name: c.GetName(), TableId: s.nextTableID, CreatedUnixNano: c.GetCreatedUnixNano()}
	s.nextTableID++
	r := &pb.RangeDescriptor{
		RangeId: s.nextRangeID, Table: t.GetName(), TableId: t.GetTableId(),
		Generation: 1, Replicas: c.GetReplicas(),
	}
	if anchor := s.liveAnchor(c.GetGroupId()); anchor != nil {
		// A span of the home group (docs/range-groups.md, stage 7): the
		// group's replicas as this map holds them, the same on every
		// master; ADD_SPAN stores it with the namesake's own.
		r.GroupId = anchor.GetRangeId()
		r.Replicas = cloneReplicas(anchor.GetReplicas())
	}
	s.nextRangeID++
	s.putTable(key, t)
	s.putRange(r)
	return &applyResult{table: t, ranges: []*pb.RangeDescriptor{r}}
}

func applyDeleteTable(s *state, payload []byte) *applyResult {
	var c pb.DeleteTableCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE
	if r, ok := s.request(c.GetRequestId(), kind, c.GetName()); ok {
		return replay(r)
	}
	res := deleteTable(s, c.GetName())
	// The record keeps the ranges: a retry (of an answer lost, or of one
	// that their freeze did not come in time for) freezes them again
	// before it answers (freezeDeleted), on whichever master it reaches.
	s.record(c.GetRequestId(), kind, c.GetName(), res)
	return res
}

func deleteTable(s *state, name string) *applyResult {
	key := strings.ToLower(name)
	t, ok := s.tables[key]
	if !ok {
		return &applyResult{err: ErrTableNotFound}
	}
	s.dropTable(key)
	var gone []*pb.RangeDescriptor
	for _, id := range s.rangesOf(t.GetTableId()) {
		gone = append(gone, s.ranges[id])
		s.dropRange(id)
		// Range ids are never reused, and a deleted table's ranges never
		// come back (applyUpdateRanges: tableLive).
		delete(s.started, id)
	}
	if len(gone) > 0 {
		// Until a leader confirms them frozen (DELETED_RANGES_FROZEN),
		// whichever master leads freezes them and refuses the name.
		s.deletedPending[t.GetTableId()] = &pb.DeletedTable{TableId: t.GetTableId(), Name: t.GetName(), Ranges: gone}
	}
	return &applyResult{table: t, ranges: gone}
}

// deletePendingName reports whether a deleted table of that name, of a
// table id at least since (0: any), has ranges not yet confirmed frozen.
func (s *state) deletePendingName(name string, since uint64) bool {
	for _, d := range s.deletedPending {
		if d.GetTableId() >= since && strings.EqualFold(d.GetName(), name) {
			return true
		}
	}
	return false
}

// applyDeletedRangesFrozen clears a deleted table's pending freeze (its
// ranges froze or are gone, or the freezing gave up). An id not pending
// (cleared already, by a leader deposed before it saw the commit) is no
// error.
func applyDeletedRangesFrozen(s *state, payload []byte) *applyResult {
	var c pb.DeletedRangesFrozenCommand
	if err := proto.Unmarshal(payload, &c); err != nil || c.GetTableId() == 0 {
		return &applyResult{err: ErrBadCommand}
	}
	delete(s.deletedPending, c.GetTableId())
	return &applyResult{}
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
	s.putTable(strings.ToLower(c.GetName()), nt)
	return &applyResult{table: nt}
}

func applySetServiceProperties(s *state, payload []byte) *applyResult {
	var c pb.SetServicePropertiesCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	s.setServiceProperties(c.GetAccount(), c.GetProperties())
	s.changedOther()
	return &applyResult{}
}

// servedProperties is what the map carries of the other accounts'
// service properties: the documents of the accounts the registry serves
// (all when it is empty: it names none). A document of an account no
// longer served is kept, not sent: a front-end still on an older account
// list that restarts during a rollout publishes a registry without a
// newer account for a while, and the account's document must come back
// with it.
func (s *state) servedProperties() map[string][]byte {
	if len(s.accounts) == 0 || len(s.accountProperties) == 0 {
		return s.accountProperties
	}
	served := servedAccounts(s.accounts)
	out := make(map[string][]byte, len(s.accountProperties))
	for a, d := range s.accountProperties {
		if served[a] {
			out[a] = d
		}
	}
	if len(out) == len(s.accountProperties) {
		return s.accountProperties
	}
	return out
}

// servedAccounts is the set of the registry's account names.
func servedAccounts(accts []*pb.StorageAccount) map[string]bool {
	served := make(map[string]bool, len(accts))
	for _, a := range accts {
		served[a.GetName()] = true
	}
	return served
}

// setServiceProperties stores an account's document: the empty account
// (every entry from before accounts were named) is the primary one. An
// empty document forgets the account's (it has the defaults again).
func (s *state) setServiceProperties(account string, doc []byte) {
	s.changedProps()
	if account == "" {
		s.serviceProperties = doc
		return
	}
	next := make(map[string][]byte, len(s.accountProperties)+1)
	for a, d := range s.accountProperties {
		next[a] = d
	}
	if len(doc) == 0 {
		delete(next, account)
	} else {
		next[account] = doc
	}
	if len(next) == 0 {
		next = nil
	}
	s.accountProperties = next
}

func applySetAccounts(s *state, payload []byte) *applyResult {
	var c pb.SetAccountsCommand
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &applyResult{err: ErrBadCommand}
	}
	// The slice is shared with readers of earlier snapshots: replace it.
	s.accounts = c.GetAccounts()
	// The map carries the documents of the accounts served (fillShared).
	s.changedProps()
	s.changedOther()
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
		old, ok := s.ranges[d.GetRangeId()]
		if ok && old.GetGeneration() >= d.GetGeneration() {
			continue
		}
		if s.coveredByNewer(d) {
			// A range a merge already absorbed, reported late.
			continue
		}
		for id, o := range s.ranges {
			if id != d.GetRangeId() && o.GetTableId() == d.GetTableId() && overlaps(o, d) && o.GetGeneration() < d.GetGeneration() {
				s.dropRange(id)
			}
		}
		s.dropLeftAttach(old, d)
		s.putRange(d)
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

// retiredBy reports whether ranges of the table other than d's, each of a
// generation at least d's, cover d's whole span: d's range is gone (merged
// away, or split with its id's own later descriptor recorded), so a
// replica of it is retired. Overlap alone is no proof: applyUpdateRanges
// drops an older range that a newer adopted descriptor merely overlaps, so
// a split's right half adopted before its left half leaves the parent's id
// out of the map for a while although the parent (its left half, same id)
// lives, with voters that have not applied the split yet.
func (s *state) retiredBy(d *pb.RangeDescriptor) bool {
	var newer []*pb.RangeDescriptor
	for id := range s.tableRanges[d.GetTableId()] {
		o := s.ranges[id]
		if id != d.GetRangeId() && o != nil && o.GetGeneration() >= d.GetGeneration() && overlaps(o, d) {
			newer = append(newer, o)
		}
	}
	return coversSpan(d, newer)
}

// coversSpan reports whether the union of spans covers d's span.
func coversSpan(d *pb.RangeDescriptor, spans []*pb.RangeDescriptor) bool {
	pos := d.GetStart()
	for {
		// The span that starts at or before pos and reaches furthest.
		var best *pb.RangeDescriptor
		for _, o := range spans {
			if o.GetStart() > pos || (o.GetEnd() != "" && o.GetEnd() <= pos) {
				continue
			}
			if best == nil || o.GetEnd() == "" || (best.GetEnd() != "" && o.GetEnd() > best.GetEnd()) {
				best = o
			}
		}
		switch {
		case best == nil:
			return false
		case best.GetEnd() == "":
			return true
		case d.GetEnd() != "" && best.GetEnd() >= d.GetEnd():
			return true
		}
		pos = best.GetEnd()
	}
}

func (s *state) tableLive(id uint64) bool {
	_, ok := s.tableIDs[id]
	return ok
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
	s.dropRange(c.GetRangeId())
	if l := c.GetAbsorbedBy(); l != nil {
		if old, ok := s.ranges[l.GetRangeId()]; !ok || old.GetGeneration() < l.GetGeneration() {
			if s.tableLive(l.GetTableId()) {
				s.putRange(l)
			}
		}
	}
	return &applyResult{}
}

// fsm is the master's raft.FSM; onChange runs after every applied command
// with the tables and ranges it touched, and with nil after a restore
// (anything may have changed).
type fsm struct {
	mu       sync.RWMutex
	st       *state
	onChange func(*changeSet)
	// version names the state for heartbeat answers (assignments): the
	// index of the last command applied, so every master that applied the
	// same log names the same state alike; after a restore, a number no
	// log index reaches (the next answer to every server is sent whole).
	version uint64
	// index is the Raft log index of the last command applied (kept in
	// snapshots): unlike version it survives a restore, since it names
	// the state in the maps sent to front-ends (PartitionMap.index),
	// which compare it across masters. 0: unknown (restored from a
	// snapshot from before it was kept, no command applied since).
	index uint64
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
	cs := &changeSet{}
	f.mu.Lock()
	f.st.changes = cs
	res := h(f.st, cmd.GetPayload())
	f.st.changes = nil
	f.version = l.Index
	f.index = l.Index
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange(cs)
	}
	return res
}

func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	snap := f.st.snapshot()
	snap.AppliedIndex = f.index
	b, err := proto.Marshal(snap)
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
	f.version = rand.Uint64() | 1<<63
	f.index = m.GetAppliedIndex()
	f.mu.Unlock()
	if f.onChange != nil {
		f.onChange(nil)
	}
	return nil
}

// read runs fn under the state's read lock.
func (f *fsm) read(fn func(s *state)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st)
}

// readIndexed is read with the Raft index of the state fn reads (fsm.index).
func (f *fsm) readIndexed(fn func(s *state, index uint64)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.st, f.index)
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
