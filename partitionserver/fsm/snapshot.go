package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// Snapshot stream of a group that is its range's only span (group_id 0):
// magic, then the span's body: uvarint-prefixed RangeState, then records
// of uvarint-prefixed key and value, ended by a zero-length key (encoded
// keys are never empty); then the range's request records (request id,
// value) in the same form, ended the same way. A group that names itself
// in its spans' records writes groupSnapshotMagic, the number of spans
// (uvarint), then each span's body: a server that predates groups cannot
// install it, and need not, as it cannot serve such a group either.
const (
	snapshotMagic      = "TSRNG002"
	groupSnapshotMagic = "TSRNG003"
	// maxSnapshotSpans bounds the span count a snapshot may claim.
	maxSnapshotSpans = 1 << 10
)

type snapshot struct {
	tx     *bolt.Tx
	states []*pb.RangeState
}

var _ raft.FSMSnapshot = (*snapshot)(nil)

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

// legacy reports whether the snapshot is written in the one-range format.
func (s *snapshot) legacy() bool {
	return len(s.states) == 1 && s.states[0].GetRange().GetGroupId() == 0
}

func (s *snapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	var tmp [binary.MaxVarintLen64]byte
	putBytes := func(b []byte) error {
		n := binary.PutUvarint(tmp[:], uint64(len(b)))
		if _, err := bw.Write(tmp[:n]); err != nil {
			return err
		}
		_, err := bw.Write(b)
		return err
	}
	if s.legacy() {
		if _, err := bw.WriteString(snapshotMagic); err != nil {
			return err
		}
	} else {
		if _, err := bw.WriteString(groupSnapshotMagic); err != nil {
			return err
		}
		n := binary.PutUvarint(tmp[:], uint64(len(s.states)))
		if _, err := bw.Write(tmp[:n]); err != nil {
			return err
		}
	}
	for _, st := range s.states {
		if err := s.writeSpan(st, putBytes); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// writeSpan writes one span's body.
func (s *snapshot) writeSpan(st *pb.RangeState, putBytes func([]byte) error) error {
	hdr, err := proto.Marshal(st)
	if err != nil {
		return err
	}
	if err := putBytes(hdr); err != nil {
		return err
	}
	desc := st.GetRange()
	b, err := tableBucket(s.tx, desc.GetTableId(), false)
	if err != nil {
		return err
	}
	if b != nil {
		err := walkSpan(b, desc, func(k, v []byte) error {
			if err := putBytes(k); err != nil {
				return err
			}
			return putBytes(v)
		})
		if err != nil {
			return err
		}
	}
	if err := putBytes(nil); err != nil {
		return err
	}
	err = forEachRequest(s.tx, desc, func(k, v []byte) error {
		if err := putBytes(k[8:]); err != nil {
			return err
		}
		return putBytes(v)
	})
	if err != nil {
		return err
	}
	return putBytes(nil)
}

func (s *snapshot) Release() { _ = s.tx.Rollback() }

// snapshotReader reads a snapshot stream's framing.
type snapshotReader struct{ br *bufio.Reader }

// spans reads the magic and returns how many span bodies follow.
func (r snapshotReader) spans() (uint64, error) {
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(r.br, magic); err != nil {
		return 0, fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
	}
	switch string(magic) {
	case snapshotMagic:
		return 1, nil
	case groupSnapshotMagic:
		n, err := binary.ReadUvarint(r.br)
		if err != nil || n == 0 || n > maxSnapshotSpans {
			return 0, fmt.Errorf("%w: %d spans (%v)", ErrCorruptSnapshot, n, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
}

func (r snapshotReader) bytes() ([]byte, error) {
	n, err := binary.ReadUvarint(r.br)
	if err != nil {
		return nil, err
	}
	if n > 64<<20 {
		return nil, fmt.Errorf("%w: record of %d bytes", ErrCorruptSnapshot, n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r.br, b)
	return b, err
}

// skipBody reads past one span's entities and request records (each a
// list of key and value pairs ended by an empty key).
func (r snapshotReader) skipBody() error {
	for range 2 {
		for {
			k, err := r.bytes()
			if err != nil {
				return fmt.Errorf("%w: record: %v", ErrCorruptSnapshot, err)
			}
			if len(k) == 0 {
				break
			}
			if _, err := r.bytes(); err != nil {
				return fmt.Errorf("%w: record: %v", ErrCorruptSnapshot, err)
			}
		}
	}
	return nil
}

func (r snapshotReader) header() (*pb.RangeState, error) {
	hdr, err := r.bytes()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
	}
	state := &pb.RangeState{}
	if err := proto.Unmarshal(hdr, state); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
	}
	return state, nil
}

// restoreInto replaces the group's spans (their states, entities and
// request records) with the snapshot's and returns the snapshot's states
// and the ranges it subsumed. Entities outside the snapshot's spans are
// left alone: they belong to other ranges of the table on this server. An
// older range stored here whose span one of the snapshot's covers was
// merged into it (this replica missed the merge's log entry): its state
// goes, and the snapshot brings its keys. A span whose record here named
// its own group (this replica missed the entry that attached it) is
// listed in attached: its own group ends here.
func restoreInto(tx *bolt.Tx, r io.Reader, groupID uint64) ([]*pb.RangeState, []mergedSpan, []attachedSpan, error) {
	sr := snapshotReader{br: bufio.NewReaderSize(r, 256<<10)}
	n, err := sr.spans()
	if err != nil {
		return nil, nil, nil, err
	}
	// The group's spans here, wherever they are in the snapshot: their
	// records go first, so that clearing their keys keeps only what
	// other ranges serve.
	old, err := spanIDs(tx, groupID)
	if err != nil {
		return nil, nil, nil, err
	}
	var olds []*pb.RangeDescriptor
	for _, id := range old {
		st, err := getState(tx, id)
		if err != nil {
			return nil, nil, nil, err
		}
		if st.GetFrozen() && !st.GetTableDeleted() {
			// Frozen for a merge this replica's left range has not
			// applied yet: a snapshot taken after the merge elsewhere no
			// longer holds it (the merge took it out of the group), and
			// the left range's Merge entry needs its record and rows
			// here. Kept unless the snapshot brings it (restoreSpan then
			// replaces it); its rows are final at the freeze.
			continue
		}
		olds = append(olds, st.GetRange())
		if err := tx.Bucket(bucketRanges).Delete(u64(id)); err != nil {
			return nil, nil, nil, err
		}
	}
	for _, d := range olds {
		if err := clearSpan(tx, d); err != nil {
			return nil, nil, nil, err
		}
	}
	var states []*pb.RangeState
	var subsumed []mergedSpan
	var attached []attachedSpan
	seen := map[uint64]bool{}
	skipped := 0
	for range n {
		state, dropped, took, err := restoreSpan(tx, sr, groupID)
		if err != nil {
			return nil, nil, nil, err
		}
		if state == nil {
			skipped++ // merged here already (restoreSpan)
			continue
		}
		if id := state.GetRange().GetRangeId(); seen[id] {
			return nil, nil, nil, fmt.Errorf("%w: range %d twice", ErrCorruptSnapshot, id)
		} else {
			seen[id] = true
		}
		if len(states) > 0 && state.GetAppliedIndex() != states[0].GetAppliedIndex() {
			return nil, nil, nil, fmt.Errorf("%w: spans applied to %d and %d", ErrCorruptSnapshot, states[0].GetAppliedIndex(), state.GetAppliedIndex())
		}
		states = append(states, state)
		for _, id := range dropped {
			subsumed = append(subsumed, mergedSpan{into: state.GetRange().GetRangeId(), right: id})
		}
		if took {
			attached = append(attached, attachedSpan{group: groupID, right: state.GetRange().GetRangeId()})
		}
	}
	if len(states) == 0 {
		// A group whose every span was merged here ends with those
		// merges (RangeMerged stops it): nothing to restore into.
		return nil, nil, nil, fmt.Errorf("%w: group %d: the snapshot's %d spans were all merged into ranges here", ErrRangeNotFound, groupID, skipped)
	}
	return states, subsumed, attached, nil
}

// restoreSpan restores one span's body of a snapshot of group groupID;
// took: the span's record here named a group of its own, which the
// snapshot's group took it from (an attach this replica missed).
func restoreSpan(tx *bolt.Tx, sr snapshotReader, groupID uint64) (state *pb.RangeState, subsumed []uint64, took bool, err error) {
	state, err = sr.header()
	if err != nil {
		return nil, nil, false, err
	}
	if g := rangegroup.GroupOf(state.GetRange()); g != groupID {
		return nil, nil, false, fmt.Errorf("%w: snapshot of range %d of group %d restored into group %d", ErrCorruptSnapshot, state.GetRange().GetRangeId(), g, groupID)
	}
	id := state.GetRange().GetRangeId()
	old, err := getState(tx, id)
	if err != nil && !errors.Is(err, errRangeStateAbsent) {
		return nil, nil, false, err
	}
	if state.GetFrozen() {
		// Taken between the span's freeze and its merge, restored where
		// the left range has merged it already (and may have written
		// over its keys since): a range of another group, newer than
		// the span, covers it here. Its body is skipped; restored, it
		// would serve again and overwrite the newer rows.
		if newer, err := mergedHere(tx, state.GetRange(), groupID); err != nil {
			return nil, nil, false, err
		} else if newer {
			return nil, nil, false, sr.skipBody()
		}
		if old != nil && rangegroup.GroupOf(old.GetRange()) != groupID && old.GetRange().GetGeneration() > state.GetRange().GetGeneration() {
			// The same, for an attach (docs/range-groups.md, stage
			// 8): taken between the range's freeze and its attach,
			// restored (its own group still running here a moment)
			// where another group's ATTACH_SPAN took it already. Its
			// record, that group's span now, stays.
			return nil, nil, false, sr.skipBody()
		}
	}
	if old != nil {
		// Recorded here as another group's span: the snapshot's group
		// serves it now (it left that group by an entry this replica
		// never applied). Its keys go as the group's own did. A record
		// of a group of its own was attached by such an entry: that
		// group ends here (AttachHooks).
		took = groupID != id && rangegroup.GroupOf(old.GetRange()) == id
		if err := tx.Bucket(bucketRanges).Delete(u64(id)); err != nil {
			return nil, nil, false, err
		}
		if err := clearSpan(tx, old.GetRange()); err != nil {
			return nil, nil, false, err
		}
	}
	subsumed, err = dropSubsumed(tx, state.GetRange())
	if err != nil {
		return nil, nil, false, err
	}
	if err := clearSpan(tx, state.GetRange()); err != nil {
		return nil, nil, false, err
	}
	b, err := tableBucket(tx, state.GetRange().GetTableId(), true)
	if err != nil {
		return nil, nil, false, err
	}
	for {
		k, err := sr.bytes()
		if err != nil {
			return nil, nil, false, fmt.Errorf("%w: record: %v", ErrCorruptSnapshot, err)
		}
		if len(k) == 0 {
			break
		}
		v, err := sr.bytes()
		if err != nil {
			return nil, nil, false, fmt.Errorf("%w: record: %v", ErrCorruptSnapshot, err)
		}
		if err := b.Put(k, v); err != nil {
			return nil, nil, false, err
		}
	}
	for {
		id, err := sr.bytes()
		if err != nil {
			return nil, nil, false, fmt.Errorf("%w: request record: %v", ErrCorruptSnapshot, err)
		}
		if len(id) == 0 {
			break
		}
		v, err := sr.bytes()
		if err != nil {
			return nil, nil, false, fmt.Errorf("%w: request record: %v", ErrCorruptSnapshot, err)
		}
		if err := storeRequest(tx, requestKey(state.GetRange().GetTableId(), id), v); err != nil {
			return nil, nil, false, err
		}
	}
	if err := putState(tx, state); err != nil {
		return nil, nil, false, err
	}
	return state, subsumed, took, nil
}

// clearSpan deletes the entities and request records of d's span that no
// other range stored here serves.
func clearSpan(tx *bolt.Tx, d *pb.RangeDescriptor) error {
	owned, err := ownedElsewhere(tx, d)
	if err != nil {
		return err
	}
	if err := deleteSpan(tx, d, owned); err != nil {
		return err
	}
	return deleteRequests(tx, d, func(v []byte) bool {
		pk, _ := requestPK(v)
		return !owned(pk)
	})
}

// dropSubsumed deletes the state of every older range of d's table stored
// here whose span d covers, and returns their ids.
func dropSubsumed(tx *bolt.Tx, d *pb.RangeDescriptor) ([]uint64, error) {
	var ids []uint64
	err := tx.Bucket(bucketRanges).ForEach(func(k, v []byte) error {
		o := &pb.RangeState{}
		if err := proto.Unmarshal(v, o); err != nil {
			return err
		}
		od := o.GetRange()
		if od.GetRangeId() != d.GetRangeId() && od.GetTableId() == d.GetTableId() &&
			od.GetGeneration() < d.GetGeneration() && covers(d, od) {
			ids = append(ids, od.GetRangeId())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := tx.Bucket(bucketRanges).Delete(u64(id)); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// mergedHere reports whether a range stored here outside group groupID,
// of d's table and newer than d, covers d's span: d was merged into it.
func mergedHere(tx *bolt.Tx, d *pb.RangeDescriptor, groupID uint64) (bool, error) {
	found := false
	err := tx.Bucket(bucketRanges).ForEach(func(k, v []byte) error {
		o := &pb.RangeState{}
		if err := proto.Unmarshal(v, o); err != nil {
			return err
		}
		od := o.GetRange()
		if od.GetRangeId() != d.GetRangeId() && rangegroup.GroupOf(od) != groupID && od.GetTableId() == d.GetTableId() &&
			od.GetGeneration() > d.GetGeneration() && covers(od, d) {
			found = true
		}
		return nil
	})
	return found, err
}

// covers reports whether d's span contains o's.
func covers(d, o *pb.RangeDescriptor) bool {
	return o.GetStart() >= d.GetStart() && (d.GetEnd() == "" || (o.GetEnd() != "" && o.GetEnd() <= d.GetEnd()))
}

// RestoreNewerSnapshot restores the newest snapshot of snaps, the range's
// own store, when it holds entries the file does not, and reports whether
// it did. Call it before the range's raft starts. dir is the directory
// snaps was made on (raft.NewFileSnapshotStore's base; "" for another
// kind of store).
//
// raft installs a leader's snapshot by writing it to snaps first and
// restoring it into the state machine (Restore, its own commit) after: a
// crash between the two, or a failed restore, leaves the snapshot stored
// and the file behind it. With NoSnapshotRestoreOnStart raft then takes
// the newest stored snapshot as applied and replays only the entries after
// it, so the entries between the file's applied index and the snapshot's
// (the reason a snapshot was sent: the log no longer has them) would never
// reach the file. A snapshot this file's own range took is never ahead of
// it (Snapshot commits first); its index may pass the state's by entries
// the state machine never sees (barriers, no-ops), so the state's applied
// index in the snapshot's header decides, not the meta's.
//
// That is the common case (a move's compaction snapshots after a barrier,
// and a quiet range then opens on every wake), so the header is read
// straight from the snapshot's file, not through snaps.Open, which reads
// and checksums the whole snapshot first; and a snapshot found not ahead
// is remembered and not read again. Only a restore pays the checked read.
// A header that cannot be read fails the open: raft would take that
// snapshot as applied, and the file may be behind it (a replica missing
// entries that could lead and answer reads without them). The replica
// stays closed (the lifecycle's OpenFailed) and its range is served by
// the others, as for any replica whose files are damaged.
func (r *Range) RestoreNewerSnapshot(snaps raft.SnapshotStore, dir string) (bool, error) {
	return r.g.RestoreNewerSnapshot(snaps, dir)
}

// RestoreNewerSnapshot restores the group's newest stored snapshot when it
// holds entries the file does not (Range.RestoreNewerSnapshot).
func (g *Group) RestoreNewerSnapshot(snaps raft.SnapshotStore, dir string) (bool, error) {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return false, err
	}
	newest := list[0]
	applied := g.AppliedIndex()
	if newest.Index <= applied {
		return false, nil
	}
	if p := g.checkedSnapshot.Load(); p != nil && *p == newest.ID {
		return false, nil
	}
	st, err := snapshotHeader(snaps, dir, newest.ID)
	if err != nil {
		return false, fmt.Errorf("fsm: group %d: snapshot %s (index %d, the state file's %d): reading its header: %w", g.id, newest.ID, newest.Index, applied, err)
	}
	if st.GetAppliedIndex() <= applied {
		id := newest.ID
		g.checkedSnapshot.Store(&id)
		return false, nil
	}
	_, rc, err := snaps.Open(newest.ID)
	if err != nil {
		return false, err
	}
	if err := g.Restore(rc); err != nil {
		return false, fmt.Errorf("fsm: group %d: snapshot %s: %w", g.id, newest.ID, err)
	}
	return true, nil
}

// snapshotHeader reads the range state at the head of snapshot id: from
// the file raft.FileSnapshotStore keeps it in when dir is set, else
// through snaps.
func snapshotHeader(snaps raft.SnapshotStore, dir, id string) (*pb.RangeState, error) {
	var rc io.ReadCloser
	if dir != "" {
		f, err := os.Open(filepath.Join(dir, "snapshots", id, "state.bin"))
		if errors.Is(err, fs.ErrNotExist) {
			// Listed (its meta is there) without its state: damage, as
			// a header that does not read (an EACCES or EMFILE is the
			// server's, not the replica's, and stays a plain error).
			return nil, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
		}
		if err != nil {
			return nil, err
		}
		rc = f
	} else {
		_, r, err := snaps.Open(id)
		if err != nil {
			return nil, err
		}
		rc = r
	}
	defer rc.Close()
	return snapshotState(rc)
}

// snapshotState reads the state of the first span at the head of a
// snapshot stream (every span's applied index is the group's).
func snapshotState(r io.Reader) (*pb.RangeState, error) {
	sr := snapshotReader{br: bufio.NewReader(r)}
	if _, err := sr.spans(); err != nil {
		return nil, err
	}
	return sr.header()
}
