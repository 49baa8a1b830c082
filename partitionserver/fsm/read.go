package fsm

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"tablestore/internal/edm"
	"tablestore/internal/keys"
	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// Get returns the stored entity (edm binary) or ErrEntityNotFound.
func (r *Range) Get(pk, rk string) ([]byte, error) {
	var out []byte
	err := r.store.db.View(func(tx *bolt.Tx) (err error) {
		out, err = r.getTx(tx, pk, rk)
		return err
	})
	return out, err
}

// Key is one entity's key, for GetMany.
type Key struct{ PK, RK string }

// GetMany reads several entities in one read transaction: each gets what
// Get would have returned for it (its bytes or its own error), from one
// snapshot of the committed state. A bbolt read transaction (its locks,
// the meta page copy, the range state's lookup) was about a tenth of a
// range leader's CPU per point read when each read opened its own.
func (r *Range) GetMany(ks []Key) ([][]byte, []error) {
	out := make([][]byte, len(ks))
	errs := make([]error, len(ks))
	err := r.store.db.View(func(tx *bolt.Tx) error {
		rng, b, err := r.readView(tx)
		if err != nil {
			return err
		}
		for i, k := range ks {
			out[i], errs[i] = lookup(rng, b, k.PK, k.RK)
		}
		return nil
	})
	if err != nil {
		for i := range errs {
			out[i], errs[i] = nil, err
		}
	}
	return out, errs
}

func (r *Range) getTx(tx *bolt.Tx, pk, rk string) ([]byte, error) {
	rng, b, err := r.readView(tx)
	if err != nil {
		return nil, err
	}
	return lookup(rng, b, pk, rk)
}

// readView is what a point read of tx needs of the range: its bounds and
// its table's bucket (nil: the table holds nothing yet).
func (r *Range) readView(tx *bolt.Tx) (*pb.RangeDescriptor, *bolt.Bucket, error) {
	st, err := r.committedState(tx)
	if err != nil {
		return nil, nil, ErrRangeNotFound
	}
	if st.GetFrozen() {
		// A frozen range's keys may already be served by the left
		// neighbour that merged it: reading here could miss its writes.
		return nil, nil, ErrRangeFrozen
	}
	b, err := tableBucket(tx, st.GetRange().GetTableId(), false)
	if err != nil {
		return nil, nil, err
	}
	return st.GetRange(), b, nil
}

// lookup reads one entity of a range's table bucket b.
func lookup(rng *pb.RangeDescriptor, b *bolt.Bucket, pk, rk string) ([]byte, error) {
	if !InRange(rng, pk) {
		return nil, ErrKeyOutOfRange
	}
	if b == nil {
		return nil, ErrEntityNotFound
	}
	v := b.Get(keys.Encode(pk, rk))
	if v == nil {
		return nil, ErrEntityNotFound
	}
	return append([]byte(nil), v...), nil
}

// ScanOptions bound a scan of one range.
type ScanOptions struct {
	// Start is the first key to consider (inclusive); nil starts at the
	// range's (or Lower's) beginning. StartPK is its PartitionKey, which
	// must belong to the range: a caller with a stale map learns so instead
	// of silently skipping keys another range serves.
	Start   []byte
	StartPK string
	// Lower and Upper bound the PartitionKeys scanned (inclusive), when set.
	HasLower bool
	Lower    string
	HasUpper bool
	Upper    string
	// KeyLower and KeyUpper narrow the scan to the encoded keys in
	// [KeyLower, KeyUpper) when set: the filter's exact key bounds (an
	// exclusive PartitionKey bound, a RowKey range within one partition),
	// which Lower and Upper cannot say. Keys outside them cannot match,
	// so they are not read, and a page never continues past them.
	KeyLower, KeyUpper []byte
	// Match selects entities; nil matches all.
	Match func(*edm.Entity) bool
	// Project rewrites a matched entity before it is returned; nil keeps it.
	Project func(*edm.Entity) *edm.Entity
	Limit   int
	// Deadline stops the scan early (a continuation is returned).
	Deadline time.Time
}

// ScanResult is one page of a scan.
type ScanResult struct {
	Entities [][]byte
	// Next is the key to resume from; nil when the range (within the
	// bounds) is exhausted.
	Next       []byte
	Descriptor *pb.RangeDescriptor
}

// Scan walks the range in key order.
func (r *Range) Scan(o ScanOptions) (*ScanResult, error) {
	res := &ScanResult{}
	err := r.store.db.View(func(tx *bolt.Tx) error {
		st, err := r.committedState(tx)
		if err != nil {
			return ErrRangeNotFound
		}
		if st.GetFrozen() {
			return ErrRangeFrozen
		}
		desc := st.GetRange()
		// The caller owns the result; st is shared.
		res.Descriptor = proto.Clone(desc).(*pb.RangeDescriptor)
		if o.Start != nil && !InRange(desc, o.StartPK) {
			return ErrKeyOutOfRange
		}
		b, err := tableBucket(tx, desc.GetTableId(), false)
		if err != nil || b == nil {
			return err
		}
		lo, hi := span(desc)
		if o.HasLower {
			if l := keys.PartitionStart(o.Lower); lo == nil || bytes.Compare(l, lo) > 0 {
				lo = l
			}
		}
		if o.KeyLower != nil && (lo == nil || bytes.Compare(o.KeyLower, lo) > 0) {
			lo = o.KeyLower
		}
		if o.Start != nil && (lo == nil || bytes.Compare(o.Start, lo) > 0) {
			lo = o.Start
		}
		if o.HasUpper {
			if u := keys.PartitionEnd(o.Upper); hi == nil || bytes.Compare(u, hi) < 0 {
				hi = u
			}
		}
		if o.KeyUpper != nil && (hi == nil || bytes.Compare(o.KeyUpper, hi) < 0) {
			hi = o.KeyUpper
		}
		c := b.Cursor()
		var k, v []byte
		if lo == nil {
			k, v = c.First()
		} else {
			k, v = c.Seek(lo)
		}
		checkEvery := 0
		for ; k != nil && (hi == nil || bytes.Compare(k, hi) < 0); k, v = c.Next() {
			if len(res.Entities) >= o.Limit && o.Limit > 0 {
				res.Next = append([]byte(nil), k...)
				return nil
			}
			if checkEvery++; checkEvery%256 == 0 && !o.Deadline.IsZero() && time.Now().After(o.Deadline) {
				res.Next = append([]byte(nil), k...)
				return nil
			}
			if o.Match == nil && o.Project == nil {
				res.Entities = append(res.Entities, append([]byte(nil), v...))
				continue
			}
			e, err := edm.UnmarshalBinary(v)
			if err != nil {
				return err
			}
			if o.Match != nil && !o.Match(e) {
				continue
			}
			if o.Project != nil {
				e = o.Project(e)
				res.Entities = append(res.Entities, edm.MarshalBinary(e))
				continue
			}
			res.Entities = append(res.Entities, append([]byte(nil), v...))
		}
		return nil
	})
	return res, err
}

// stateView is a decoded copy of a range's stored state and the bytes it
// was decoded from.
type stateView struct {
	raw []byte
	st  *pb.RangeState
}

// committedState returns the range's state as stored in tx, for reads: the
// same transaction as the data they read, so the two agree. Reads between
// two writes see the same bytes, so the decoded state is reused while the
// stored bytes are unchanged. The result is shared: read it, never modify.
//
// A record that names another group is absent for this span: the range
// left this group by an entry this replica's group log may not hold
// (docs/range-groups.md, invariant 4), and this replica may lack its
// writes since.
func (r *Range) committedState(tx *bolt.Tx) (*pb.RangeState, error) {
	v := tx.Bucket(bucketRanges).Get(u64(r.id))
	if v == nil {
		return nil, errRangeStateAbsent
	}
	if c := r.readState.Load(); c != nil && bytes.Equal(c.raw, v) {
		return r.ours(c.st)
	}
	st := &pb.RangeState{}
	if err := proto.Unmarshal(v, st); err != nil {
		return nil, fmt.Errorf("fsm: range state %d: %w", r.id, err)
	}
	r.readState.Store(&stateView{raw: bytes.Clone(v), st: st})
	return r.ours(st)
}

// ours returns st if it names r's group, errRangeStateAbsent if not.
func (r *Range) ours(st *pb.RangeState) (*pb.RangeState, error) {
	if rangegroup.GroupOf(st.GetRange()) != r.g.id {
		return nil, errRangeStateAbsent
	}
	return st, nil
}
