package master

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/failpoint"
	"tablestore/internal/metricsbridge"
	"tablestore/internal/rpcerr"
	"tablestore/master/scheduler"
	pb "tablestore/proto/tablestorepb"
)

type service struct {
	pb.UnimplementedMasterServiceServer
	s *Server
}

// toStatus translates master errors into the rpcerr contract.
func toStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotLeader):
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonNotLeader, err.Error(), nil)
	case errors.Is(err, ErrTableExists):
		return rpcerr.New(codes.AlreadyExists, rpcerr.ReasonTableAlreadyExists, err.Error(), nil)
	case errors.Is(err, ErrTableNotFound):
		return rpcerr.New(codes.NotFound, rpcerr.ReasonTableNotFound, err.Error(), nil)
	case errors.Is(err, ErrTableBeingDeleted):
		return rpcerr.New(codes.AlreadyExists, rpcerr.ReasonTableBeingDeleted, err.Error(), nil)
	case errors.Is(err, ErrNotEnoughServers), errors.Is(err, ErrStartNotRecorded), errors.Is(err, ErrAddSpan):
		return rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
	case errors.Is(err, ErrBadCommand), errors.Is(err, ErrBadMember):
		return rpcerr.New(codes.InvalidArgument, rpcerr.ReasonInvalidInput, err.Error(), nil)
	case errors.Is(err, ErrUnknownMember), errors.Is(err, ErrUnknownServer):
		return rpcerr.New(codes.NotFound, "", err.Error(), nil)
	case errors.Is(err, ErrMemberExists), errors.Is(err, ErrLastMember), errors.Is(err, ErrDrainTooFew),
		errors.Is(err, ErrServerInUse), errors.Is(err, ErrServerUp), errors.Is(err, ErrQuorumLoss),
		errors.Is(err, ErrMemberUnreachable):
		return rpcerr.New(codes.FailedPrecondition, "", err.Error(), nil)
	}
	return rpcerr.New(codes.Internal, "", err.Error(), nil)
}

// placement picks the least-loaded live servers for a new range: those
// with room on their disk first (scheduler.Disk.State: a low one, then a
// full one, only when too few others are live, so that a table can still
// be created on a cluster whose disks are all low), over as many zones as
// they are in (scheduler.Spread: the zone rule, within each disk state).
func (s *Server) placement() ([]*pb.Replica, map[string]string, error) {
	now := time.Now()
	counts := map[string]int{}
	var live []string
	addrs := map[string]string{}
	zones := map[string]string{}
	seen, spaces := s.reports.seen(), s.reports.spaces()
	disk := func(id string) scheduler.DiskState { return diskOf(spaces[id]).State() }
	s.fsm.read(func(st *state) {
		for id, n := range st.replicaCount {
			counts[id] = n
		}
		for id, sv := range st.servers {
			addrs[id] = sv.GetRaftAddr()
			zones[id] = sv.GetZone()
			// Nothing new goes to a server being drained.
			if s.upAt(seen, id, now) && !sv.GetDraining() {
				live = append(live, id)
			}
		}
	})
	if len(live) < s.cfg.ReplicationFactor {
		return nil, nil, fmt.Errorf("%w: %d live and not draining, %d needed", ErrNotEnoughServers, len(live), s.cfg.ReplicationFactor)
	}
	sort.Slice(live, func(i, j int) bool {
		if di, dj := disk(live[i]), disk(live[j]); di != dj {
			return di < dj
		}
		if counts[live[i]] != counts[live[j]] {
			return counts[live[i]] < counts[live[j]]
		}
		return live[i] < live[j]
	})
	cands := make([]scheduler.Candidate, 0, len(live))
	for _, id := range live {
		cands = append(cands, scheduler.Candidate{ID: id, Zone: zones[id], Tier: int(disk(id))})
	}
	chosen := scheduler.Spread(cands, s.cfg.ReplicationFactor)
	// The first replica campaigns for the new range's leadership
	// (createReplicas): not a slow server's nor a full one's, when another
	// was chosen, or the slow-disk or full-disk rule would move it at once.
	slow := s.reports.slowServers(time.Now())
	unfit := func(id string) bool { return slow[id] || disk(id) == scheduler.DiskFull }
	sort.SliceStable(chosen, func(i, j int) bool { return !unfit(chosen[i]) && unfit(chosen[j]) })
	var out []*pb.Replica
	for _, id := range chosen {
		out = append(out, &pb.Replica{ServerId: id})
	}
	return out, addrs, nil
}

func (v *service) CreateTable(ctx context.Context, req *pb.CreateTableRequest) (*pb.CreateTableResponse, error) {
	s := v.s
	if err := userTableName(req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_CREATE_TABLE
	var (
		exists   bool
		pending  bool   // a deleted table of the name not yet frozen
		since    uint64 // the next table id: tables created after this check
		recorded *pb.TableRequestRecord
		id       []byte
	)
	s.fsm.read(func(st *state) {
		_, exists = st.tables[strings.ToLower(req.GetName())]
		pending = st.deletePendingName(req.GetName(), 0)
		since = st.nextTableID
		id, recorded = st.requestToApply(req.GetRequestId(), req.GetClientRequestId(), kind, req.GetName())
	})
	if recorded != nil {
		return s.createdBefore(ctx, req, replay(recorded))
	}
	// A fast path: the command's apply decides by the same rule.
	if err := nameFree(exists, pending); err != nil {
		return nil, toStatus(err)
	}
	replicas, addrs, group, err := s.createPlacement()
	if err != nil {
		return nil, toStatus(err)
	}
	if err := failpoint.Inject("master/create-table/before-commit"); err != nil {
		// A delay here widens the window between the name check above
		// and the create's commit (another create or a delete of the
		// name may commit in it).
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
	}
	start := time.Now()
	res, err := s.apply(kind, &pb.CreateTableCommand{
		Name: req.GetName(), CreatedUnixNano: time.Now().UnixNano(), Replicas: replicas, RequestId: id,
		RefuseDeletedSince: since, GroupId: group,
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if res.replayed {
		// Another attempt of the same request (the front-end's retry of
		// one still running here) committed first: answered as a retry,
		// which starts the range only if that attempt has not (a started
		// range's replica is never bootstrapped again), and announced by
		// that attempt alone.
		return s.createdBefore(ctx, req, res)
	}
	return s.createCommitted(ctx, req, res, addrs, start)
}

// createCommitted answers a CreateTable whose command created the table:
// it starts the table's range and announces it.
func (s *Server) createCommitted(ctx context.Context, req *pb.CreateTableRequest, res *applyResult, addrs map[string]string, start time.Time) (*pb.CreateTableResponse, error) {
	applied := time.Now()
	if err := failpoint.Inject("master/create-table/after-commit"); err != nil {
		// The answer is lost after the commit (a timeout, a dropped
		// connection): the client's retry must find the table created.
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
	}
	resp, err := s.created(ctx, res, addrs)
	if resp != nil {
		// Read after the range's start: with its leader, or without the
		// table when a delete overtook the answer.
		resp.Map = s.tableDelta(req.GetName())
		if err := failpoint.Inject("master/create-table/after-read"); err != nil {
			// The answer, read, is lost; a delay here is one late on its
			// way (this master may have lost the leadership since).
			return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
		}
	}
	s.event(s.createdEvent(res, causeOperator))
	s.logger.Debug("table created", "table", res.table.GetName(), "commit", applied.Sub(start), "start_range", time.Since(applied), "leader", resp.GetLeader())
	return resp, err
}

// createdBefore answers a retry of a CreateTable already applied with its
// first answer (res: its record, replayed). The first attempt started the
// range, unless its answer was lost or failed on the mark, or it is still
// running: startReplayed finishes that (the range may even be gone since).
func (s *Server) createdBefore(ctx context.Context, req *pb.CreateTableRequest, res *applyResult) (*pb.CreateTableResponse, error) {
	if res.err != nil {
		return nil, toStatus(res.err)
	}
	leader, err := s.startReplayed(ctx, res.ranges)
	if err != nil {
		return nil, toStatus(err)
	}
	// The table may be gone (or created again) since: the map says what
	// is there now.
	return &pb.CreateTableResponse{Table: res.table, Ranges: res.ranges, Leader: leader, Map: s.tableDelta(req.GetName())}, nil
}

// created starts a new table's ranges and answers CreateTable with the
// table, its ranges and the first range's leader, or with a retryable
// status when a range's start could not be recorded.
func (s *Server) created(ctx context.Context, res *applyResult, addrs map[string]string) (*pb.CreateTableResponse, error) {
	resp := &pb.CreateTableResponse{Table: res.table, Ranges: res.ranges}
	for i, r := range res.ranges {
		var live, marked bool
		s.fsm.read(func(st *state) {
			_, live = st.ranges[r.GetRangeId()]
			_, marked = st.started[r.GetRangeId()]
		})
		if !live {
			// The table was deleted before its range started: no
			// replicas for it (the servers would only collect them), no
			// wait for a leader that never comes.
			continue
		}
		if marked {
			// A retry of this request, answered from its record while
			// this attempt ran, started it (startReplayed): a started
			// range's replica is never bootstrapped again.
			if i == 0 {
				resp.Leader = s.reports.leaderOf(r.GetRangeId())
			}
			continue
		}
		var l string
		var err error
		if groupSpan(r) {
			// Recorded in a home group: that group's log starts it.
			l, err = s.addSpan(ctx, r)
		} else {
			l, err = s.startRange(ctx, r, addrs)
		}
		if err != nil {
			return nil, toStatus(err)
		}
		if i == 0 {
			resp.Leader = l
		}
	}
	return resp, nil
}

// startRange asks the replicas to bootstrap a new range and waits (bounded)
// until one of them leads it, so the first write after CreateTable need not
// wait for an election. It returns the leader, "" when none was seen in
// time; once it saw one, it records the range's start (startedRange) and
// fails with ErrStartNotRecorded when it could not.
func (s *Server) startRange(ctx context.Context, r *pb.RangeDescriptor, addrs map[string]string) (string, error) {
	// A delete of the table waits for this start before it looks for the
	// range's replicas (freezeDeletedRange): registered first, then the
	// range checked live, so that either the delete sees the start or the
	// start sees the delete.
	defer s.starting.begin(r.GetRangeId())()
	if _, live := s.rangeDesc(r.GetRangeId()); !live {
		return "", nil
	}
	// The replicas are created even when the caller gives up first (its
	// retry is answered from the request record and does not create them):
	// otherwise they wait for the servers' next heartbeats.
	createCtx, cancelCreate := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CreateTableWait)
	defer cancelCreate()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CreateTableWait)
	defer cancel()
	grpcAddrs := map[string]string{}
	s.fsm.read(func(st *state) {
		for id, sv := range st.servers {
			grpcAddrs[id] = sv.GetGrpcAddr()
		}
	})
	t0 := time.Now()
	defer func() { s.logger.Debug("range started", "range", r.GetRangeId(), "took", time.Since(t0)) }()
	if leader := s.createReplicas(createCtx, r, addrs, grpcAddrs); leader != "" {
		if s.reports.setLeader(r.GetRangeId(), leader) {
			s.bump()
		}
		return leader, s.startedRange(r.GetRangeId())
	}
	s.logger.Debug("range replicas created", "range", r.GetRangeId(), "took", time.Since(t0))
	for ctx.Err() == nil {
		for _, rep := range r.GetReplicas() {
			c, err := s.pool.Partition(grpcAddrs[rep.GetServerId()])
			if err != nil {
				continue
			}
			info, err := c.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: r.GetRangeId()})
			if err == nil && info.GetStatus().GetLeader() {
				if s.reports.setLeader(r.GetRangeId(), rep.GetServerId()) {
					s.bump()
				}
				return rep.GetServerId(), s.startedRange(r.GetRangeId())
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.logger.Warn("new range has no leader yet", "range", r.GetRangeId())
	return "", nil
}

// createReplicas asks every replica of new range r to bootstrap it and
// returns its leader when the campaigning replica reports it won.
func (s *Server) createReplicas(ctx context.Context, r *pb.RangeDescriptor, addrs, grpcAddrs map[string]string) string {
	var wg sync.WaitGroup
	var leaderMu sync.Mutex
	leader := ""
	for _, rep := range r.GetReplicas() {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			c, err := s.pool.Partition(grpcAddrs[id])
			if err != nil {
				return
			}
			// The first replica (the least loaded server) campaigns at once,
			// and answers once its election settled.
			campaign := id == r.GetReplicas()[0].GetServerId()
			resp, err := c.CreateReplica(ctx, &pb.CreateReplicaRequest{Range: r, Bootstrap: true, Campaign: campaign, RaftAddrs: addrs})
			if err != nil {
				s.logger.Warn("create replica failed; the server will catch up by heartbeat", "range", r.GetRangeId(), "server", id, "err", err)
				return
			}
			if resp.GetLeaderServerId() == id {
				// A replica's word for itself, as RangeInfo's below.
				leaderMu.Lock()
				leader = id
				leaderMu.Unlock()
			}
		}(rep.GetServerId())
	}
	wg.Wait()
	return leader
}

func (v *service) DeleteTable(ctx context.Context, req *pb.DeleteTableRequest) (*pb.DeleteTableResponse, error) {
	s := v.s
	if reservedName(req.GetName()) {
		return nil, toStatus(fmt.Errorf("%w: %q", ErrReservedName, req.GetName()))
	}
	kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_DELETE_TABLE
	var id []byte
	// A record that still holds is replayed by the command itself.
	s.fsm.read(func(st *state) {
		id, _ = st.requestToApply(req.GetRequestId(), req.GetClientRequestId(), kind, req.GetName())
	})
	res, err := s.apply(kind, &pb.DeleteTableCommand{Name: req.GetName(), RequestId: id})
	if err != nil {
		return nil, toStatus(err)
	}
	if !res.replayed {
		// Once per delete, by the attempt that deleted: a retry answered
		// from the record deleted nothing.
		s.event(&pb.Event{Kind: pb.EventKind_EVENT_KIND_TABLE_DELETED, Table: res.table.GetName(), Cause: causeOperator,
			Message: fmt.Sprintf("table %s deleted", res.table.GetName())})
	}
	if err := failpoint.Inject("master/delete-table/after-commit"); err != nil {
		// The answer is lost after the commit: the client's retry must
		// be answered 204 (from the request record), not 404.
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
	}
	// The answer waits until no range of the table serves any more
	// (tabledelete.go): a front-end whose map is behind still routes the
	// table to them. Then their replicas are deleted (best effort; the
	// servers also drop replicas of deleted tables on their heartbeats).
	tableID := res.table.GetTableId()
	if tableID == 0 && len(res.ranges) > 0 {
		tableID = res.ranges[0].GetTableId()
	}
	if err := s.freezeDeleted(ctx, req.GetName(), tableID, res.ranges); err != nil {
		// Deleted, but a range may still serve: an unknown outcome (500
		// OperationTimedOut). The client's retry is answered from the
		// request record once the ranges froze.
		s.logger.Warn("table deleted, its ranges not all frozen yet", "table", req.GetName(), "err", err)
		return nil, err
	}
	// Read now, not assumed: the table may already be created again.
	resp := &pb.DeleteTableResponse{Map: s.tableDelta(req.GetName())}
	if err := failpoint.Inject("master/delete-table/after-read"); err != nil {
		// As master/create-table/after-read.
		return nil, rpcerr.New(codes.Unavailable, rpcerr.ReasonUnavailable, err.Error(), nil)
	}
	return resp, nil
}

// maxSignedIdentifiers is Azure's limit of stored access policies per table.
const maxSignedIdentifiers = 5

func (v *service) SetTableACL(ctx context.Context, req *pb.SetTableACLRequest) (*pb.SetTableACLResponse, error) {
	if reservedName(req.GetName()) {
		return nil, toStatus(fmt.Errorf("%w: %q", ErrReservedName, req.GetName()))
	}
	if len(req.GetAcl()) > maxSignedIdentifiers {
		return nil, toStatus(fmt.Errorf("%w: more than %d signed identifiers", ErrBadCommand, maxSignedIdentifiers))
	}
	if _, err := v.s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_TABLE_ACL, &pb.SetTableACLCommand{Name: req.GetName(), Acl: req.GetAcl()}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SetTableACLResponse{}, nil
}

// SetServiceProperties replaces one account's service properties.
func (v *service) SetServiceProperties(ctx context.Context, req *pb.SetServicePropertiesRequest) (*pb.SetServicePropertiesResponse, error) {
	var err error
	v.s.fsm.read(func(st *state) {
		err = checkServiceProperties(req.GetAccount(), req.GetProperties(), st.accountProperties, st.accounts)
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if _, err := v.s.apply(servicePropertiesKind(req.GetAccount()), &pb.SetServicePropertiesCommand{Properties: req.GetProperties(), Account: req.GetAccount()}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SetServicePropertiesResponse{}, nil
}

// servicePropertiesKind is the command kind of a Set Service Properties:
// the primary account's (empty) keeps the kind every build applies; another
// account's has its own, which an older master skips as unknown rather
// than taking the document for the primary account's.
func servicePropertiesKind(account string) pb.MasterCommandKind {
	if account == "" {
		return pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVICE_PROPERTIES
	}
	return pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNT_SERVICE_PROPERTIES
}

// maxAccounts bounds the account registry (it travels with every map).
const maxAccounts = 100

func (v *service) SetAccounts(ctx context.Context, req *pb.SetAccountsRequest) (*pb.SetAccountsResponse, error) {
	if err := validateAccounts(req.GetAccounts()); err != nil {
		return nil, toStatus(err)
	}
	if _, err := v.s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS, &pb.SetAccountsCommand{Accounts: req.GetAccounts()}); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SetAccountsResponse{}, nil
}

// validateAccounts applies Azure's account name rule (3-24 lowercase
// letters and digits), one or two non-empty keys, and no name twice.
func validateAccounts(accts []*pb.StorageAccount) error {
	if len(accts) > maxAccounts {
		return fmt.Errorf("%w: more than %d accounts", ErrBadCommand, maxAccounts)
	}
	seen := map[string]bool{}
	for _, a := range accts {
		n := a.GetName()
		if !validAccountName(n) || seen[n] {
			return fmt.Errorf("%w: account name %q", ErrBadCommand, n)
		}
		seen[n] = true
		if len(a.GetKeys()) == 0 || len(a.GetKeys()) > 2 {
			return fmt.Errorf("%w: account %q needs one or two keys", ErrBadCommand, n)
		}
		for _, k := range a.GetKeys() {
			if len(k) == 0 {
				return fmt.Errorf("%w: account %q has an empty key", ErrBadCommand, n)
			}
		}
	}
	return nil
}

// validAccountName is Azure's account name rule: 3-24 lowercase letters
// and digits.
func validAccountName(n string) bool {
	ok := len(n) >= 3 && len(n) <= 24
	for i := 0; i < len(n); i++ {
		ok = ok && (n[i] >= 'a' && n[i] <= 'z' || n[i] >= '0' && n[i] <= '9')
	}
	return ok
}

// maxServicePropertiesDoc bounds one account's document, a sanity bound:
// the front-ends take a body of at most 64 KiB and store it normalized
// (a little longer when elements were left out); the documents travel
// with every map.
const maxServicePropertiesDoc = 128 << 10

// maxServicePropertiesTotal bounds the documents of all accounts but the
// primary one together: they travel in whole maps (and the deltas that
// change them) to every front-end, ctl and loadgen, under gRPC's receive
// limit (4 MiB for clients of older builds). At 2 KiB, a usual document
// with a few CORS rules, the 100 accounts take a tenth of it.
const maxServicePropertiesTotal = 2 << 20

// checkServiceProperties refuses a document for a malformed account name,
// for an account the registry does not serve (when it names any: a
// front-end with an older account list), one too large, and one that
// would take the served accounts past maxAccounts with documents or past
// maxServicePropertiesTotal together (have: the documents kept; those of
// accounts no longer served are kept for their return but count for
// nothing, as the map does not carry them).
func checkServiceProperties(account string, doc []byte, have map[string][]byte, registry []*pb.StorageAccount) error {
	if account == "" {
		if len(doc) > maxServicePropertiesDoc {
			return fmt.Errorf("%w: service properties of %d bytes (at most %d)", ErrBadCommand, len(doc), maxServicePropertiesDoc)
		}
		return nil
	}
	if !validAccountName(account) {
		return fmt.Errorf("%w: account name %q", ErrBadCommand, account)
	}
	served := servedAccounts(registry)
	if len(registry) > 0 && !served[account] {
		return fmt.Errorf("%w: account %q is not served (the accounts registry names others)", ErrBadCommand, account)
	}
	if len(doc) > maxServicePropertiesDoc {
		return fmt.Errorf("%w: service properties of %d bytes (at most %d)", ErrBadCommand, len(doc), maxServicePropertiesDoc)
	}
	counted, total := 0, len(doc)
	for a, d := range have {
		if a == account || (len(registry) > 0 && !served[a]) {
			continue
		}
		counted++
		total += len(d)
	}
	if len(doc) > 0 && counted >= maxAccounts {
		return fmt.Errorf("%w: service properties of more than %d accounts", ErrBadCommand, maxAccounts)
	}
	if total > maxServicePropertiesTotal {
		return fmt.Errorf("%w: service properties of the accounts would take %d bytes (at most %d together)", ErrBadCommand, total, maxServicePropertiesTotal)
	}
	return nil
}

func (v *service) GetPartitionMap(ctx context.Context, req *pb.GetPartitionMapRequest) (*pb.PartitionMap, error) {
	if err := v.s.ready(); err != nil {
		return nil, toStatus(err)
	}
	if req.GetTable() != "" {
		return v.s.tableDelta(req.GetTable()), nil
	}
	m, _ := v.s.partitionMap()
	return m, nil
}

func (v *service) WatchPartitionMap(req *pb.WatchPartitionMapRequest, stream pb.MasterService_WatchPartitionMapServer) error {
	s := v.s
	if err := s.ready(); err != nil {
		return toStatus(err)
	}
	fw := s.frontends.add(req.GetFrontend(), peerAddr(stream.Context()), time.Now())
	defer s.frontends.remove(fw)
	if req.GetDeltas() {
		return s.watchDeltas(stream, fw)
	}
	sent := uint64(0)
	first := true
	for {
		m, ch := s.partitionMap()
		if first || m.GetVersion() != sent {
			if err := stream.Send(m); err != nil {
				return err
			}
			sent, first = m.GetVersion(), false
			fw.sent(sent, time.Now())
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.ctx.Done():
			return toStatus(ErrNotLeader)
		case <-ch:
		case <-time.After(time.Second):
		}
		if !s.IsLeader() {
			return toStatus(ErrNotLeader)
		}
	}
}

// watchDeltas serves a watch that asked for deltas: the whole map, then
// what changed, at most one message per change batch. fw is the
// front-end on it (nil: none said who it is).
func (s *Server) watchDeltas(stream pb.MasterService_WatchPartitionMapServer, fw *frontendWatch) error {
	w := s.addWatcher()
	defer s.removeWatcher(w)
	m, _ := s.partitionMap()
	m.Keepalives = true
	if err := stream.Send(m); err != nil {
		return err
	}
	mapSendsTotal.WithLabelValues("full").Inc()
	epoch, sent, lastSend := m.GetEpoch(), m.GetVersion(), time.Now()
	fw.sent(sent, lastSend)
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.ctx.Done():
			return toStatus(ErrNotLeader)
		case <-w.wake:
		case <-time.After(watchKeepalive):
		}
		if !s.IsLeader() {
			return toStatus(ErrNotLeader)
		}
		cs, leaders, soft, full, version := s.take(w)
		kind := "delta"
		switch {
		case full:
			m, _ = s.partitionMap()
			m.Keepalives = true
			kind = "full"
		case len(cs.tables) > 0 || len(cs.ranges) > 0 || len(leaders) > 0 || soft || cs.other:
			m = s.partitionDelta(cs, leaders, version)
		case time.Since(lastSend) >= watchKeepalive:
			m = &pb.PartitionMap{Delta: true, Keepalive: true, Epoch: epoch, Version: sent}
			kind = "keepalive"
		default:
			fw.upTo(version) // nothing pending concerns it
			continue
		}
		mapSendsTotal.WithLabelValues(kind).Inc()
		if err := stream.Send(m); err != nil {
			return err
		}
		sent, lastSend = max(sent, m.GetVersion()), time.Now()
		fw.sent(max(sent, version), lastSend) // a keepalive too: nothing was pending
	}
}

// watchKeepalive is how long a delta watch stays silent when nothing
// changes: then it sends a keepalive (PartitionMap.keepalive), by which
// the front-end tells a quiet master from a lost link (a firewall that
// drops packets leaves the stream open and silent for good).
const watchKeepalive = time.Second

// adopt records descriptors reported newer than the map's, one batch at a
// time.
func (s *Server) adopt(descs []*pb.RangeDescriptor) {
	s.softMu.Lock()
	if s.adopting {
		s.softMu.Unlock()
		return
	}
	s.adopting = true
	s.softMu.Unlock()
	defer func() {
		s.softMu.Lock()
		s.adopting = false
		s.softMu.Unlock()
	}()
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_UPDATE_RANGES, &pb.UpdateRangesCommand{Ranges: descs}); err != nil {
		s.logger.Debug("adopting reported ranges failed", "err", err)
	}
}

func (v *service) Heartbeat(ctx context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	s := v.s
	// The clock's receive time, before anything that may wait (the
	// registration's apply, the server's turn).
	received := time.Now()
	if err := s.ready(); err != nil {
		return nil, toStatus(err)
	}
	sv := req.GetServer()
	if sv.GetServerId() == "" {
		return nil, toStatus(ErrBadCommand)
	}
	if err := s.register(sv); err != nil {
		return nil, toStatus(err)
	}
	defer s.reports.serverTurn(sv.GetServerId())()
	now := time.Now()
	take, wantFull, span := s.reports.accept(sv.GetServerId(), req, now)
	s.reports.setMergeAbort(sv.GetServerId(), req.GetMergeAbort())
	s.reports.setTableGroups(sv.GetServerId(), req.GetTableGroups())
	s.reports.setAttachSpans(sv.GetServerId(), req.GetAttachSpans())
	resp := s.fsm.assignments(sv.GetServerId(), req.GetAssignmentsVersion())
	resp.WantFullReport = wantFull
	s.noteClock(sv.GetServerId(), req, resp, received)
	if !take {
		return resp, nil
	}
	s.noteDisk(sv.GetServerId(), req, now)
	s.noteSpace(sv.GetServerId(), req.GetDiskSpace())
	full := reportIsFull(req)
	s.progress.observe(sv.GetServerId(), req.GetRanges(), req.GetRemovedRangeIds(), full, now)
	changed, throttled := s.reports.heartbeat(s.cfg.Policy.Config, sv.GetServerId(), req.GetRanges(), req.GetRemovedRangeIds(), full, span, now)
	for _, rs := range throttled {
		s.throttleEvent(sv.GetServerId(), rs)
	}
	if changed {
		s.bump()
	}
	s.noteStarted(s.fsm.unstartedLed(req.GetRanges()))
	newer, retired, stale := s.fsm.reconcile(sv.GetServerId(), req.GetRanges())
	if len(newer) > 0 {
		go s.adopt(newer)
	}
	s.collectOnHeartbeat(sv.GetServerId(), req, resp, stale, full, now)
	resp.RetiredRangeIds = retired
	return resp, nil
}

// collectOnHeartbeat is the replica GC's share of a heartbeat: note the
// stale replicas reported, expedite those that hold up an assigned range,
// and ask for the deletes that are due.
func (s *Server) collectOnHeartbeat(server string, req *pb.HeartbeatRequest, resp *pb.HeartbeatResponse, stale map[uint64]uint64, full bool, now time.Time) {
	for id, gen := range stale {
		s.replicaGC.observe(server, id, gen, now)
	}
	// Only when what it depends on may have moved (the map, this server's
	// replicas) or on a full report: its scan is O(replicas hosted), and
	// an unchanged heartbeat is otherwise O(changes). An expedited entry
	// stays urgent for the retries of due.
	if !resp.GetAssignmentsUnchanged() || full || len(req.GetRanges()) > 0 || len(req.GetRemovedRangeIds()) > 0 {
		for _, id := range s.staleHoldingUp(server) {
			s.replicaGC.expedite(server, id, now)
		}
	}
	for _, id := range s.replicaGC.due(server, now) {
		if s.reports.hostsReplica(server, id) {
			go s.collectStale(server, id)
		} else {
			s.replicaGC.unask(server, id)
		}
	}
	if full {
		s.replicaGC.forget(now)
	}
}

// validListener: empty (no listener) or a listener's host:port.
func validListener(addr string) bool { return addr == "" || metricsbridge.ListenerAddr(addr) }

// register records a new server, or a server's new addresses or zone
// (replicated: every master that leads places replicas by it).
func (s *Server) register(sv *pb.ServerInfo) error {
	if !validListener(sv.GetMetricsAddr()) || !validListener(sv.GetPprofAddr()) {
		// Not host:port: kept out of the replicated registry (ctl debug
		// zip fetches pages from these addresses), the rest registered.
		sv = proto.Clone(sv).(*pb.ServerInfo)
		if !validListener(sv.GetMetricsAddr()) {
			sv.MetricsAddr = ""
		}
		if !validListener(sv.GetPprofAddr()) {
			sv.PprofAddr = ""
		}
	}
	var known *pb.ServerInfo
	s.fsm.read(func(st *state) { known = st.servers[sv.GetServerId()] })
	if known != nil && known.GetGrpcAddr() == sv.GetGrpcAddr() && known.GetRaftAddr() == sv.GetRaftAddr() && known.GetZone() == sv.GetZone() &&
		known.GetMetricsAddr() == sv.GetMetricsAddr() && known.GetPprofAddr() == sv.GetPprofAddr() {
		return nil
	}
	if _, err := s.apply(pb.MasterCommandKind_MASTER_COMMAND_KIND_REGISTER_SERVER, &pb.RegisterServerCommand{Server: sv}); err != nil {
		return err
	}
	s.logger.Info("partition server registered", "server", sv.GetServerId(), "grpc", sv.GetGrpcAddr(), "raft", sv.GetRaftAddr(), "zone", sv.GetZone(), "metrics", sv.GetMetricsAddr())
	return nil
}

// throttleEvent records that a range's partition server refuses requests
// over a partition's target.
func (s *Server) throttleEvent(server string, rs *pb.RangeStatus) {
	var top string
	if hk := rs.GetLoad().GetHotKeys(); len(hk) > 0 {
		top = hk[0].GetPartitionKey()
	}
	t := rs.GetLoad().GetThrottledPerSec()
	s.event(&pb.Event{
		Kind: pb.EventKind_EVENT_KIND_THROTTLE, Table: rs.GetRange().GetTable(), RangeIds: []uint64{rs.GetRangeId()},
		Servers: []string{server}, Cause: causePolicy,
		Figures: map[string]float64{"throttled_per_sec": t, "entities_per_sec": rs.GetLoad().GetEntitiesPerSec()},
		Message: fmt.Sprintf("partition %q of range %d over its target: %.0f requests/s refused", top, rs.GetRangeId(), t),
	})
}

// reconcile compares reported descriptors with the catalog. The ranges' own
// Raft state is the truth: newer descriptors (a split or merge the master
// did not record, e.g. across a failover) are to be adopted; replicas of
// ranges whose whole span newer ones cover are retired (retiredBy).
//
// A replica of a range whose descriptor is of a later generation and does
// not list server is stale (replicagc.go); its range and the replica's
// own (reported) generation are returned.
func (f *fsm) reconcile(server string, ranges []*pb.RangeStatus) (newer []*pb.RangeDescriptor, retired []uint64, stale map[uint64]uint64) {
	f.read(func(st *state) {
		for _, rs := range ranges {
			d := rs.GetRange()
			known, ok := st.ranges[d.GetRangeId()]
			switch {
			case ok && known.GetGeneration() < d.GetGeneration():
				newer = append(newer, d)
			case ok && known.GetGeneration() > d.GetGeneration() && !hasReplica(known, server):
				if stale == nil {
					stale = map[uint64]uint64{}
				}
				stale[d.GetRangeId()] = d.GetGeneration()
			case !ok && !st.tableLive(d.GetTableId()):
				// Deleted tables are cleaned up by live_table_ids.
			case !ok && st.retiredBy(d):
				retired = append(retired, d.GetRangeId())
			case !ok && st.coveredByNewer(d):
				// Overlapped but not covered: the map lost the range for
				// a while (retiredBy). Neither retired nor adopted: a
				// replica of it may be a live voter.
			case !ok:
				newer = append(newer, d)
			}
		}
	})
	return newer, retired, stale
}

// assignments is the catalog's answer to a heartbeat: the server's ranges,
// the live tables, the servers' Raft addresses; or, when the server holds
// them already (have is the catalog's version), only that they are
// unchanged: an idle cluster's heartbeats no longer carry the catalog.
func (f *fsm) assignments(server string, have uint64) *pb.HeartbeatResponse {
	resp := &pb.HeartbeatResponse{}
	f.read(func(st *state) {
		resp.AssignmentsVersion = f.version
		if have != 0 && have == f.version {
			resp.AssignmentsUnchanged = true
			return
		}
		resp.RaftAddrs = map[string]string{}
		resp.RangeStartsKnown = true
		for _, r := range st.ranges {
			for _, rep := range r.GetReplicas() {
				if rep.GetServerId() == server {
					resp.Assigned = append(resp.Assigned, proto.Clone(r).(*pb.RangeDescriptor))
					if _, started := st.started[r.GetRangeId()]; mayBootstrap(r, started) {
						resp.UnstartedRangeIds = append(resp.UnstartedRangeIds, r.GetRangeId())
					}
				}
			}
		}
		for _, t := range st.tables {
			resp.LiveTableIds = append(resp.LiveTableIds, t.GetTableId())
		}
		for id, o := range st.servers {
			resp.RaftAddrs[id] = o.GetRaftAddr()
		}
		resp.NextTableId = st.nextTableID
	})
	return resp
}
