package grouptransport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"tablestore/partitionserver/lease"
)

// Frame kinds. A response carries the kind of its request with respFlag set.
const (
	kindAppendEntries byte = iota + 1
	kindRequestVote
	kindRequestPreVote
	kindTimeoutNow
	kindInstallSnapshot
	// kindConfirmQuiet: a quiet read's question to another voter (confirm
	// lane only; see ConfirmQuiet). Never delivered to raft.
	kindConfirmQuiet

	respFlag byte = 0x80
)

// Response status, the first byte of a response payload.
const (
	statusOK byte = iota
	statusRaftError
	statusUnknownGroup
	// statusUnsupported: a well-formed request of a kind this server does
	// not handle (a newer server's); the sender treats it as "no".
	statusUnsupported
	// statusPromised: statusOK for a successful AppendEntries whose
	// follower promised its leader a read lease (package lease).
	statusPromised
)

// Lanes of a connection, named in its hello.
const (
	laneControl byte = iota
	laneAppend
	laneSnapshot
	// laneConfirm carries quiet-read confirmations, dialed on first use. A
	// lane of its own because a server that predates it closes the
	// connection on the hello (an unknown lane) instead of on a request of
	// an unknown kind in the middle of the control lane, which would fail
	// the heartbeats of every group queued on it.
	laneConfirm
	numLanes = 2 // long-lived raft lanes per peer; snapshots dial their own
)

// A frame is a 4-byte big-endian length of the rest, then kind (1), group
// (8), request id (8) and the payload.
const (
	frameHeader  = 4 + 1 + 8 + 8
	maxFrameSize = 1 << 30
)

var (
	// errUnknownKind: a request kind this server does not know; it is
	// answered statusUnsupported, the connection stays.
	errUnknownKind = errors.New("unknown request kind")
	// errSnapshotOnStream: an InstallSnapshot on a long-lived lane, without
	// the data stream only a snapshot connection carries.
	errSnapshotOnStream = errors.New("grouptransport: snapshot request on a stream lane")
	// ErrFrame reports a malformed frame or message; the connection is closed.
	ErrFrame   = errors.New("grouptransport: malformed frame")
	helloMagic = [4]byte{'T', 'S', 'G', 'T'}
)

// helloVersion is the replication protocol's version; a server refuses
// connections of another. 2: range leaders may propose WriteBatchCommand
// entries, which a server of version 1 would not apply (it would answer
// "unknown command" and diverge), so the two must not replicate with each
// other. 3: a range's log may hold COMMAND_KIND_UNFREEZE (an aborted
// merge, docs/reliability.md 16), which a server of version 2 would skip
// and stay frozen, missing every write after it. A server of another
// version is a down peer; docs/operations.md has the upgrade rule. 4: read
// leases (package lease): a RequestVote carries its transfer token, a
// TimeoutNow its leader's transfer term, and a follower's answer may be
// statusPromised; a server of version 3 would refuse the first two and
// misread the third. 5: a group's log may hold COMMAND_KIND_SPLIT_SPAN
// (a group serving several ranges, docs/range-groups.md), which a server
// of version 4 would answer "unknown command" and diverge from: it would
// serve the parent's whole span and refuse the new range's writes. 6:
// COMMAND_KIND_DETACH_SPAN (a span leaving its group, docs/range-groups.md
// stage 4), which a server of version 5 would answer "unknown command":
// it would go on serving the span in the old group and never start the
// new one. 7: COMMAND_KIND_ADD_SPAN (a table's range added to a shared
// group, docs/range-groups.md stage 7), which a server of version 6 would
// answer "unknown command": it would never serve the span its peers
// serve, and a later entry of the span's would fail there alone. 8:
// ADD_SPAN's max_spans (AddSpanCommand; a group refuses a span past the
// cap), which a server of version 7 would ignore: it would store a span
// its peers refused, and serve a table they do not. 9:
// COMMAND_KIND_ATTACH_SPAN (a table's own group taken into a shared group,
// docs/range-groups.md stage 8), which a server of version 8 would answer
// "unknown command": it would never serve the span its peers serve, and
// go on running the range's own group frozen.
const helloVersion = 9

// bufPool holds encode buffers; very large ones are not kept.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBuf = 1 << 20

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooledBuf {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// startFrame appends a frame header whose length is filled by endFrame.
func startFrame(b []byte, kind byte, group, id uint64) []byte {
	b = append(b, 0, 0, 0, 0, kind)
	b = binary.BigEndian.AppendUint64(b, group)
	return binary.BigEndian.AppendUint64(b, id)
}

func endFrame(b []byte) []byte {
	binary.BigEndian.PutUint32(b[:4], uint32(len(b)-4))
	return b
}

type frame struct {
	kind    byte
	group   uint64
	id      uint64
	payload []byte
}

// readFrame reads one frame into a fresh buffer: decoded log entries alias
// it, so it is never reused.
func readFrame(r io.Reader, hdr *[frameHeader]byte) (frame, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n < frameHeader-4 || n > maxFrameSize {
		return frame{}, fmt.Errorf("%w: length %d", ErrFrame, n)
	}
	f := frame{kind: hdr[4], group: binary.BigEndian.Uint64(hdr[5:13]), id: binary.BigEndian.Uint64(hdr[13:21])}
	if rest := int(n) - (frameHeader - 4); rest > 0 {
		p, err := readPayload(r, rest)
		if err != nil {
			return frame{}, err
		}
		f.payload = p
	}
	return f, nil
}

// payloadChunk is how much of a frame's claimed length is allocated before
// any of it has arrived.
const payloadChunk = 1 << 20

// readPayload reads n bytes into a fresh slice that grows (doubling) as
// they arrive: the length is the sender's claim, and a corrupt or hostile
// header (up to maxFrameSize) followed by a few bytes must not cost the
// whole claim in memory, per connection. A frame up to payloadChunk, the
// common case, takes one allocation; a larger one copies at most its own
// size again.
func readPayload(r io.Reader, n int) ([]byte, error) {
	p := make([]byte, 0, min(n, payloadChunk))
	for {
		m, err := io.ReadFull(r, p[len(p):cap(p)])
		p = p[:len(p)+m]
		if err != nil {
			return nil, err
		}
		if len(p) == n {
			return p, nil
		}
		grown := make([]byte, len(p), min(n, 2*cap(p)))
		copy(grown, p)
		p = grown
	}
}

// enc appends the binary form of raft's messages.
type enc []byte

func (e enc) u(v uint64) enc     { return binary.AppendUvarint(e, v) }
func (e enc) i(v int64) enc      { return binary.AppendVarint(e, v) }
func (e enc) bytes(p []byte) enc { return append(e.u(uint64(len(p))), p...) }
func (e enc) bool(v bool) enc {
	if v {
		return append(e, 1)
	}
	return append(e, 0)
}

func (e enc) header(h raft.RPCHeader) enc {
	return e.i(int64(h.ProtocolVersion)).bytes(h.ID).bytes(h.Addr)
}

// dec reads what enc wrote; the first error sticks and later reads return
// zero values. Byte slices alias the input.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() {
	if d.err == nil {
		d.err = ErrFrame
	}
	d.b = nil
}

func (d *dec) u() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) i() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) bytes() []byte {
	n := d.u()
	if d.err != nil || n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	if n == 0 {
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) bool() bool {
	if len(d.b) == 0 {
		d.fail()
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	if v > 1 {
		d.fail()
	}
	return v == 1
}

func (d *dec) header() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersion(d.i()), ID: d.bytes(), Addr: d.bytes()}
}

// done reports the decode error, or trailing bytes as one.
func (d *dec) done() error {
	if d.err == nil && len(d.b) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrFrame, len(d.b))
	}
	return d.err
}

func encodeLog(e enc, l *raft.Log) enc {
	e = e.u(l.Index).u(l.Term).u(uint64(l.Type)).bytes(l.Data).bytes(l.Extensions)
	if l.AppendedAt.IsZero() {
		return e.bool(false)
	}
	return e.bool(true).i(l.AppendedAt.UnixNano())
}

// minLogSize is the fewest bytes encodeLog writes for one entry: index,
// term, type, data and extension lengths, and the AppendedAt flag.
const minLogSize = 6

func decodeLog(d *dec) *raft.Log {
	l := &raft.Log{Index: d.u(), Term: d.u()}
	t := d.u()
	if t > 255 {
		d.fail()
	}
	l.Type = raft.LogType(t)
	l.Data = d.bytes()
	l.Extensions = d.bytes()
	if d.bool() {
		l.AppendedAt = time.Unix(0, d.i())
	}
	return l
}

// voteOut is a RequestVote as sent: with the transfer token its candidate
// was handed (zero when none).
type voteOut struct {
	*raft.RequestVoteRequest
	token lease.Token
}

// timeoutNowOut is a TimeoutNow as sent: with the term its leader started
// the transfer in (0 when it did not record one).
type timeoutNowOut struct {
	*raft.TimeoutNowRequest
	term uint64
}

// encodeRequest appends the payload of a request.
func encodeRequest(e enc, msg any) (enc, byte, error) {
	switch m := msg.(type) {
	case voteOut:
		e, kind, err := encodeRequest(e, m.RequestVoteRequest)
		return e.bytes([]byte(m.token.Leader)).u(m.token.Term), kind, err
	case timeoutNowOut:
		e, kind, err := encodeRequest(e, m.TimeoutNowRequest)
		return e.u(m.term), kind, err
	case *raft.AppendEntriesRequest:
		e = e.header(m.RPCHeader).u(m.Term).bytes(m.Leader).u(m.PrevLogEntry).u(m.PrevLogTerm).u(m.LeaderCommitIndex)
		e = e.u(uint64(len(m.Entries)))
		for _, l := range m.Entries {
			e = encodeLog(e, l)
		}
		return e, kindAppendEntries, nil
	case *raft.RequestVoteRequest:
		// Without voteOut's token: an empty one.
		return e.header(m.RPCHeader).u(m.Term).bytes(m.Candidate).u(m.LastLogIndex).u(m.LastLogTerm).bool(m.LeadershipTransfer), kindRequestVote, nil
	case *raft.RequestPreVoteRequest:
		return e.header(m.RPCHeader).u(m.Term).u(m.LastLogIndex).u(m.LastLogTerm), kindRequestPreVote, nil
	case *raft.TimeoutNowRequest:
		return e.header(m.RPCHeader), kindTimeoutNow, nil
	case *raft.InstallSnapshotRequest:
		e = e.header(m.RPCHeader).i(int64(m.SnapshotVersion)).u(m.Term).bytes(m.Leader).u(m.LastLogIndex).u(m.LastLogTerm)
		return e.bytes(m.Peers).bytes(m.Configuration).u(m.ConfigurationIndex).i(m.Size), kindInstallSnapshot, nil
	}
	return e, 0, fmt.Errorf("grouptransport: cannot encode %T", msg)
}

// decodeRequest decodes a request payload of the given kind.
func decodeRequest(kind byte, p []byte) (any, error) {
	msg, _, err := decodeRequestToken(kind, p)
	return msg, err
}

// decodeRequestToken decodes a request payload of the given kind, and the
// transfer token a RequestVote or TimeoutNow carries (a TimeoutNow's is
// its sender and transfer term).
func decodeRequestToken(kind byte, p []byte) (any, lease.Token, error) {
	d := &dec{b: p}
	var msg any
	var tok lease.Token
	switch kind {
	case kindAppendEntries:
		m := &raft.AppendEntriesRequest{RPCHeader: d.header(), Term: d.u(), Leader: d.bytes(), PrevLogEntry: d.u(), PrevLogTerm: d.u(), LeaderCommitIndex: d.u()}
		n := d.u()
		if n > uint64(len(d.b))/minLogSize {
			// More entries than the bytes can hold: refused before a
			// slot or a log struct is allocated for each claimed one.
			d.fail()
		}
		if n > 0 && d.err == nil {
			m.Entries = make([]*raft.Log, n)
			for i := range m.Entries {
				if m.Entries[i] = decodeLog(d); d.err != nil {
					break // the rest would be zero entries, allocated for nothing
				}
			}
		}
		msg = m
	case kindRequestVote:
		msg = &raft.RequestVoteRequest{RPCHeader: d.header(), Term: d.u(), Candidate: d.bytes(), LastLogIndex: d.u(), LastLogTerm: d.u(), LeadershipTransfer: d.bool()}
		if len(d.b) > 0 {
			tok.Leader = string(d.bytes())
			tok.Term = d.u()
		}
	case kindRequestPreVote:
		msg = &raft.RequestPreVoteRequest{RPCHeader: d.header(), Term: d.u(), LastLogIndex: d.u(), LastLogTerm: d.u()}
	case kindTimeoutNow:
		m := &raft.TimeoutNowRequest{RPCHeader: d.header()}
		if len(d.b) > 0 {
			tok = lease.Token{Leader: string(m.ID), Term: d.u()}
		}
		msg = m
	case kindInstallSnapshot:
		m := &raft.InstallSnapshotRequest{RPCHeader: d.header(), SnapshotVersion: raft.SnapshotVersion(d.i()), Term: d.u(), Leader: d.bytes(), LastLogIndex: d.u(), LastLogTerm: d.u()}
		m.Peers, m.Configuration, m.ConfigurationIndex, m.Size = d.bytes(), d.bytes(), d.u(), d.i()
		if m.Size < 0 {
			d.fail()
		}
		msg = m
	default:
		return nil, tok, fmt.Errorf("%w: %w %d", ErrFrame, errUnknownKind, kind)
	}
	if err := d.done(); err != nil {
		return nil, lease.Token{}, err
	}
	return msg, tok, nil
}

// QuietPosition is a quiet read's question: is the receiving voter's
// member of the group, right now, at this current term and last log entry?
type QuietPosition struct {
	Term, LastIndex, LastTerm uint64
}

// confirmAnswer is the response to a kindConfirmQuiet request.
type confirmAnswer struct{ yes bool }

func encodeConfirm(e enc, p QuietPosition) enc { return e.u(p.Term).u(p.LastIndex).u(p.LastTerm) }

func decodeConfirm(p []byte) (QuietPosition, error) {
	d := &dec{b: p}
	q := QuietPosition{Term: d.u(), LastIndex: d.u(), LastTerm: d.u()}
	return q, d.done()
}

// encodeResponse appends the payload of a successful response.
func encodeResponse(e enc, msg any) (enc, error) {
	switch m := msg.(type) {
	case *raft.AppendEntriesResponse:
		return e.header(m.RPCHeader).u(m.Term).u(m.LastLog).bool(m.Success).bool(m.NoRetryBackoff), nil
	case *raft.RequestVoteResponse:
		return e.header(m.RPCHeader).u(m.Term).bytes(m.Peers).bool(m.Granted), nil
	case *raft.RequestPreVoteResponse:
		return e.header(m.RPCHeader).u(m.Term).bool(m.Granted), nil
	case *raft.TimeoutNowResponse:
		return e.header(m.RPCHeader), nil
	case *raft.InstallSnapshotResponse:
		return e.header(m.RPCHeader).u(m.Term).bool(m.Success), nil
	case *confirmAnswer:
		return e.bool(m.yes), nil
	}
	return e, fmt.Errorf("grouptransport: cannot encode response %T", msg)
}

// decodeResponse fills resp, which must be the response type of the request.
func decodeResponse(p []byte, resp any) error {
	d := &dec{b: p}
	switch m := resp.(type) {
	case *raft.AppendEntriesResponse:
		*m = raft.AppendEntriesResponse{RPCHeader: d.header(), Term: d.u(), LastLog: d.u(), Success: d.bool(), NoRetryBackoff: d.bool()}
	case *raft.RequestVoteResponse:
		*m = raft.RequestVoteResponse{RPCHeader: d.header(), Term: d.u(), Peers: d.bytes(), Granted: d.bool()}
	case *raft.RequestPreVoteResponse:
		*m = raft.RequestPreVoteResponse{RPCHeader: d.header(), Term: d.u(), Granted: d.bool()}
	case *raft.TimeoutNowResponse:
		*m = raft.TimeoutNowResponse{RPCHeader: d.header()}
	case *raft.InstallSnapshotResponse:
		*m = raft.InstallSnapshotResponse{RPCHeader: d.header(), Term: d.u(), Success: d.bool()}
	case *confirmAnswer:
		m.yes = d.bool()
	default:
		return fmt.Errorf("grouptransport: cannot decode response %T", resp)
	}
	return d.done()
}

// isHeartbeat is raft's own test (net_transport.go): a heartbeat carries a
// term and leader and nothing else.
func isHeartbeat(m *raft.AppendEntriesRequest) bool {
	leader := m.RPCHeader.Addr
	if len(leader) == 0 {
		leader = m.Leader
	}
	return m.Term != 0 && leader != nil && m.PrevLogEntry == 0 && m.PrevLogTerm == 0 &&
		len(m.Entries) == 0 && m.LeaderCommitIndex == 0
}
