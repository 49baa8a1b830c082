package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// Snapshot stream: magic, uvarint-prefixed RangeState, then records of
// uvarint-prefixed key and value, ended by a zero-length key (encoded keys are
// never empty); then the range's request records (request id, value) in the
// same form, ended the same way.
const snapshotMagic = "TSRNG002"

type snapshot struct {
	tx    *bolt.Tx
	state *pb.RangeState
}

var _ raft.FSMSnapshot = (*snapshot)(nil)

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
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
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return err
	}
	hdr, err := proto.Marshal(s.state)
	if err != nil {
		return err
	}
	if err := putBytes(hdr); err != nil {
		return err
	}
	desc := s.state.GetRange()
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
	err = forEachRequest(s.tx, desc.GetRangeId(), func(k, v []byte) error {
		if err := putBytes(k[8:]); err != nil {
			return err
		}
		return putBytes(v)
	})
	if err != nil {
		return err
	}
	if err := putBytes(nil); err != nil {
		return err
	}
	return bw.Flush()
}

func (s *snapshot) Release() { _ = s.tx.Rollback() }

// restoreInto replaces the range's span of entities with the snapshot's and
// returns the snapshot's state. Entities outside the snapshot's descriptor
// are left alone: they belong to other ranges of the table on this server.
func restoreInto(tx *bolt.Tx, r io.Reader, rangeID uint64) (*pb.RangeState, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return nil, fmt.Errorf("%w: bad magic", ErrCorruptSnapshot)
	}
	readBytes := func() ([]byte, error) {
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, err
		}
		if n > 64<<20 {
			return nil, fmt.Errorf("%w: record of %d bytes", ErrCorruptSnapshot, n)
		}
		b := make([]byte, n)
		_, err = io.ReadFull(br, b)
		return b, err
	}
	hdr, err := readBytes()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
	}
	state := &pb.RangeState{}
	if err := proto.Unmarshal(hdr, state); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorruptSnapshot, err)
	}
	if state.GetRange().GetRangeId() != rangeID {
		return nil, fmt.Errorf("%w: snapshot of range %d restored into range %d", ErrCorruptSnapshot, state.GetRange().GetRangeId(), rangeID)
	}
	if old, err := getState(tx, rangeID); err == nil {
		if err := deleteSpan(tx, old.GetRange()); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, errRangeStateAbsent) {
		return nil, err
	}
	if err := deleteSpan(tx, state.GetRange()); err != nil {
		return nil, err
	}
	b, err := tableBucket(tx, state.GetRange().GetTableId(), true)
	if err != nil {
		return nil, err
	}
	for {
		k, err := readBytes()
		if err != nil {
			return nil, fmt.Errorf("%w: record: %v", ErrCorruptSnapshot, err)
		}
		if len(k) == 0 {
			break
		}
		v, err := readBytes()
		if err != nil {
			return nil, fmt.Errorf("%w: record: %v", ErrCorruptSnapshot, err)
		}
		if err := b.Put(k, v); err != nil {
			return nil, err
		}
	}
	if err := deleteRequests(tx, rangeID, nil); err != nil {
		return nil, err
	}
	for {
		id, err := readBytes()
		if err != nil {
			return nil, fmt.Errorf("%w: request record: %v", ErrCorruptSnapshot, err)
		}
		if len(id) == 0 {
			break
		}
		v, err := readBytes()
		if err != nil {
			return nil, fmt.Errorf("%w: request record: %v", ErrCorruptSnapshot, err)
		}
		if err := tx.Bucket(bucketRequests).Put(requestKey(rangeID, id), v); err != nil {
			return nil, err
		}
	}
	if err := putState(tx, state); err != nil {
		return nil, err
	}
	return state, nil
}
