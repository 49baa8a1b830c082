package grouptransport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// clientConn is one long-lived lane this server dialed: requests of every
// group go out through its writer and responses come back matched by id.
type clientConn struct {
	t    *Transport
	addr string
	conn net.Conn
	w    *writer

	mu      sync.Mutex
	pending map[uint64]*call
	nextID  uint64
	err     error
	// heard is when (unix ns) the peer last answered on this connection.
	heard atomic.Int64
}

// call is one request waiting for its response.
type call struct {
	ch chan callResult
}

type callResult struct {
	payload []byte
	err     error
}

func (cc *clientConn) broken() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.err != nil
}

// send encodes msg once into a pooled buffer and queues it.
func (cc *clientConn) send(group uint64, msg any) (uint64, *call, error) {
	b := getBuf()
	e, kind, err := encodeRequest(enc(startFrame((*b)[:0], 0, group, 0)), msg)
	if err != nil {
		putBuf(b)
		return 0, nil, err
	}
	*b = endFrame(e)
	(*b)[4] = kind
	return cc.sendFrame(b)
}

// sendFrame queues an encoded request frame (its id is filled in here) and
// registers the call waiting for its response.
func (cc *clientConn) sendFrame(b *[]byte) (uint64, *call, error) {
	c := &call{ch: make(chan callResult, 1)}
	cc.mu.Lock()
	if cc.err != nil {
		err := cc.err
		cc.mu.Unlock()
		putBuf(b)
		return 0, nil, err
	}
	cc.nextID++
	id := cc.nextID
	binary.BigEndian.PutUint64((*b)[13:21], id)
	cc.pending[id] = c
	cc.mu.Unlock()
	if !cc.w.send(b) {
		cc.forget(id)
		return 0, nil, fmt.Errorf("grouptransport: connection to %s closed", cc.addr)
	}
	return id, c, nil
}

func (cc *clientConn) forget(id uint64) {
	cc.mu.Lock()
	delete(cc.pending, id)
	cc.mu.Unlock()
}

// wait returns the response payload of a call, or its failure.
func (cc *clientConn) wait(id uint64, c *call, timeout time.Duration, stop <-chan struct{}) ([]byte, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case r := <-c.ch:
		return r.payload, r.err
	case <-timer.C:
		cc.forget(id)
		return nil, fmt.Errorf("%w after %v (to %s)", ErrTimeout, timeout, cc.addr)
	case <-stop:
		cc.forget(id)
		return nil, ErrClosed
	}
}

func (cc *clientConn) readLoop() {
	defer cc.t.wg.Done()
	br := bufio.NewReaderSize(cc.conn, 64<<10)
	var hdr [frameHeader]byte
	for {
		f, err := readFrame(br, &hdr)
		if err == nil && f.kind&respFlag == 0 {
			err = fmt.Errorf("%w: request on a client connection", ErrFrame)
		}
		if err != nil {
			cc.shut(err)
			return
		}
		cc.heard.Store(time.Now().UnixNano())
		cc.mu.Lock()
		c := cc.pending[f.id]
		delete(cc.pending, f.id)
		cc.mu.Unlock()
		if c != nil {
			c.ch <- callResult{payload: f.payload}
		}
	}
}

// shut closes the connection and fails every pending call; the next RPC to
// this peer dials again.
func (cc *clientConn) shut(cause error) {
	cc.mu.Lock()
	if cc.err != nil {
		cc.mu.Unlock()
		return
	}
	if cause == nil {
		cause = ErrClosed
	}
	cc.err = fmt.Errorf("grouptransport: connection to %s: %w", cc.addr, cause)
	pending := cc.pending
	cc.pending = nil
	err := cc.err
	cc.mu.Unlock()
	cc.w.close()
	cc.conn.Close()
	cc.t.untrack(cc)
	for _, c := range pending {
		c.ch <- callResult{err: err}
	}
}

// result turns a response payload into resp or the remote error.
func result(payload []byte, resp any) error {
	_, err := promisedResult(payload, resp)
	return err
}

// promisedResult is result, and the lease promise the answer carries (0:
// none).
func promisedResult(payload []byte, resp any) (time.Duration, error) {
	if len(payload) == 0 {
		return 0, fmt.Errorf("%w: empty response", ErrFrame)
	}
	switch payload[0] {
	case statusOK:
		return 0, decodeResponse(payload[1:], resp)
	case statusPromised:
		us, n := binary.Uvarint(payload[1:])
		if n <= 0 || us > uint64(time.Hour/time.Microsecond) {
			return 0, fmt.Errorf("%w: bad promise", ErrFrame)
		}
		return time.Duration(us) * time.Microsecond, decodeResponse(payload[1+n:], resp)
	}
	return 0, remoteErr(payload)
}

// remoteErr is the error of a response that is not a success.
func remoteErr(payload []byte) error {
	switch payload[0] {
	case statusRaftError:
		return errors.New(string(payload[1:]))
	case statusUnknownGroup:
		return ErrUnknownGroup
	case statusUnsupported:
		return ErrUnsupported
	}
	return fmt.Errorf("%w: status %d", ErrFrame, payload[0])
}
