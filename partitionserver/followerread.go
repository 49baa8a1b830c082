package partitionserver

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/internal/rangegroup"
	"tablestore/partitionserver/fsm"
	pb "tablestore/proto/tablestorepb"
)

// Follower reads serve the read-access secondary endpoint: any replica
// answers from its state file at once, without confirming leadership or
// waiting for the leader or for its own apply. How current the secondary
// is (Get Service Stats' LastSyncTime) is a separate question, answered
// by a read index (docs/reliability.md section 18): the front-end takes
// t0, asks the range leader for a commit index it confirms after t0
// (ReadIndex), and asks a replica whether its state holds that index
// (AppliedIndex). Only the stats pay for it; an entity read computes no
// time and waits for nothing.

// maxHeldWait bounds AppliedIndex's wait whatever the caller asks (the
// front-end asks 300 ms, or 2 s when it has no older time to answer
// with): the stats must answer rather than hang on a replica that is
// catching up.
const maxHeldWait = 2 * time.Second

// farBehind is how many entries a replica's apply may trail the index
// asked for and still be waited for: a replica further behind (restarted,
// installing a snapshot) will not catch up within maxHeldWait, and the
// wait would only urge its group commit for nothing.
const farBehind = 10_000

// readCheck prepares a read: a follower read needs its replica listed in
// the descriptor the state file holds (listedInState); any other read must
// be linearizable.
func (r *replica) readCheck(followerRead bool, linearizable func() error) error {
	if followerRead {
		return r.listedInState()
	}
	return linearizable()
}

// listedInState refuses (fsm.ErrStaleGeneration: STALE_RANGE, the
// front-end tries another replica) a follower read on a replica whose
// state file does not list it: a non-voter catching up, a replica whose
// promotion's record (SET_REPLICAS) it has not applied yet, or one whose
// removal it has. A front-end's map lists a moved-in replica once that
// record committed, maybe before the replica applied it; a LastSyncTime
// confirmed over the descriptor before the record came from a probe of
// replicas that had not applied the record either (their generation
// matched the older map), so its index is below the record's, and a
// replica that has applied the record holds it (docs/reliability.md
// section 36). The check reads the committed state before the read's own
// transaction, which sees at least as much: state only grows.
//
// A replica created empty to join its group (not a member of the initial
// configuration: a server down across a split, a replica lost) is listed
// in the master's descriptor it was created with but holds none of the
// range's entities until its first snapshot: refused while at applied
// index 0 too (the condition snapshotFirst uses).
func (r *replica) listedInState() error {
	sum := r.fsm.Summary()
	d := sum.Range
	if !sum.Bootstrap && sum.AppliedIndex == 0 {
		return fmt.Errorf("%w: range %d: this replica (%s) joined empty and waits for its first snapshot", fsm.ErrStaleGeneration, r.id, r.serverID)
	}
	for _, rep := range d.GetReplicas() {
		if rep.GetServerId() == r.serverID {
			return nil
		}
	}
	return fmt.Errorf("%w: range %d: this replica (%s) is not in its own descriptor (generation %d) yet or any more", fsm.ErrStaleGeneration, r.id, r.serverID, d.GetGeneration())
}

// readIndex returns a commit index that this replica confirms as the
// range's leader after the call: its term has committed an entry (so its
// commit index covers every earlier leader's commits), and either it holds
// a read lease (no other member can have been elected, so nothing can
// have committed outside its log: the index is read after the check) or
// the index is read and a leadership round (coalesced with concurrent
// reads') then shows a quorum still follows it in the term the index was
// read in. Any write acknowledged before the call began had committed by
// then, so its index is at most the one returned.
func (r *member) readIndex(ctx context.Context) (uint64, error) {
	if !r.isLeader() {
		return 0, ErrNotLeader
	}
	if err := r.termCommitted(ctx); err != nil {
		return 0, err
	}
	if r.leaseHeld() {
		leaseReads.Inc()
		return r.raft.CommitIndex(), nil
	}
	term := r.raft.CurrentTerm()
	if r.readyTerm.Load() != term {
		return 0, ErrNotLeader // a new term since termCommitted
	}
	idx := r.raft.CommitIndex()
	if err := r.verify.verify(ctx); err != nil {
		return 0, ErrNotLeader
	}
	// The round confirms the term current when it ran, which may be a
	// later one if this member lost the lead after reading idx and won it
	// back (a leader of a term between may have committed writes idx
	// misses). Terms only grow: the same term now was the round's.
	if r.raft.CurrentTerm() != term {
		return 0, ErrNotLeader
	}
	verifiedReads.Inc()
	return idx, nil
}

// leaseHeld reports whether this member leads its current term, which has
// committed an entry, under a read lease (grouptransport.Group.LeaseHeld).
func (r *member) leaseHeld() bool {
	term := r.raft.CurrentTerm()
	if r.readyTerm.Load() != term || !r.isLeader() {
		return false
	}
	cfg := r.raft.GetConfiguration().Configuration()
	voters := make([]string, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, string(s.ID))
		}
	}
	// The state is read again after the term: a member that lost the
	// lead in between may hold no lease.
	return r.transport.LeaseHeld(term, r.serverID, voters) && r.isLeader() && r.raft.CurrentTerm() == term
}

// heldIndex reports an index up to which this replica's reads see every
// entry: target once the state file holds it (waiting up to wait for
// that), else what the state file holds. A replica more than farBehind
// entries short of target is not waited for.
func (r *member) heldIndex(ctx context.Context, target uint64, wait time.Duration) uint64 {
	held := r.group.AppliedIndex()
	if held >= target {
		return held
	}
	if wait <= 0 || target > r.raft.AppliedIndex()+farBehind {
		return held
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if r.waitApplied(wctx, target) == nil {
		// Entries the state machine skips (no-ops, barriers) between its
		// applied index and target change nothing a read sees.
		return max(target, r.group.AppliedIndex())
	}
	return r.group.AppliedIndex()
}

func (v *service) ReadIndex(ctx context.Context, req *pb.ReadIndexRequest) (*pb.ReadIndexResponse, error) {
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	idx, err := r.readIndex(ctx)
	if err != nil {
		return nil, toStatus(r, err)
	}
	return &pb.ReadIndexResponse{Index: idx}, nil
}

func (v *service) AppliedIndex(ctx context.Context, req *pb.AppliedIndexRequest) (*pb.AppliedIndexResponse, error) {
	r, err := v.replica(req.GetRangeId())
	if err != nil {
		return nil, err
	}
	wait := min(time.Duration(req.GetWaitMs())*time.Millisecond, maxHeldWait)
	held := r.heldIndex(ctx, req.GetIndex(), wait)
	// The descriptor read after the index: it reflects every split, merge
	// or move at or below held, so a front-end that probed an older one
	// learns its map is stale. The index is durable: the state machine's
	// applied index advances only once its bbolt transaction has committed
	// (fsm.Range.notifyApplied runs after the commit), so a restart finds
	// the state file at held or beyond.
	d := r.fsm.Descriptor()
	return &pb.AppliedIndexResponse{AppliedIndex: held, Generation: d.GetGeneration(), GroupId: rangegroup.GroupOf(d)}, nil
}
