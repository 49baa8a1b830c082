package master

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The masters' Raft connections open with a hello naming the build's
// version of the master log's commands, and a master refuses a connection
// of another version, as the partition servers' group transport does
// (grouptransport helloVersion): a master of another build is then a down
// peer, not a member that applies the log differently. Version 1 (the
// first with a hello): MASTER_COMMAND_KIND_MERGE_DECISION, which a master
// without it skips; such a master could lead and send MergeRange for a
// freeze another master recorded as aborted and unfroze (the left range's
// replicas then stop: fsm applyMerge). Masters older than this send no
// hello and are refused too. Version 2: a create command's apply refuses
// a name whose deleted table is pending a freeze
// (CreateTableCommand.refuse_deleted_since), which a master of version 1
// ignores: it would create the table the others refused. From version 2
// the accepting master also answers a hello it accepts with its own,
// which the dialing master reads before raft's first answer: a probe
// (AddMember's) then learns that the other master runs another version
// (it closes without answering) instead of taking a connection for a
// member. Version 3: a create command may create an anchor or name a
// home group (CreateTableCommand.anchor, group_id; docs/range-groups.md,
// stage 7) and refuses a reserved name; a master of version 2 would
// create a user table named "" or a range of a group of its own, and
// bootstrap it. A rolling upgrade of three masters keeps a majority of one
// build at every step (docs/operations.md).
var masterHello = [5]byte{'T', 'S', 'M', 'R', 3}

// errMasterVersion: the peer's hello names another build's master log.
var errMasterVersion = errors.New("master: raft connection from a master of another version refused")

// helloStream is a raft.StreamLayer whose connections open with
// masterHello.
type helloStream struct {
	raft.StreamLayer
	logger *slog.Logger
}

// Dial implements raft.StreamLayer: it sends the hello first.
func (h helloStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	conn, err := h.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	if timeout > 0 {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	if _, err := conn.Write(masterHello[:]); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return &answeredConn{Conn: conn}, nil
}

// answeredConn is a dialed connection whose first Read consumes the
// accepting master's hello (its answer to ours) before anything else.
type answeredConn struct {
	net.Conn
	once sync.Once
	err  error
}

func (c *answeredConn) Read(p []byte) (int, error) {
	c.once.Do(func() {
		var got [len(masterHello)]byte
		if _, err := io.ReadFull(c.Conn, got[:]); err != nil {
			// Closed without an answer: a master of another version
			// refused the hello, or this one crashed or went away.
			c.err = fmt.Errorf("master: %s closed the raft connection before answering its hello (a master of another version refuses it): %w", c.RemoteAddr(), err)
			return
		}
		if !bytes.Equal(got[:], masterHello[:]) {
			c.err = fmt.Errorf("%w: hello %q from %s, want %q", errMasterVersion, got[:], c.RemoteAddr(), masterHello[:])
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}

// awaitHello waits up to timeout for the answer to a connection's hello
// (Dial of helloStream); nil at once for a connection of another kind.
func awaitHello(conn net.Conn, timeout time.Duration) error {
	c, ok := conn.(*answeredConn)
	if !ok {
		return nil
	}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(nil)
	return err
}

// Accept implements net.Listener: the hello is read by the connection's
// first Read, in raft's per-connection goroutine, so a slow peer does not
// hold the accept loop.
func (h helloStream) Accept() (net.Conn, error) {
	conn, err := h.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &helloConn{Conn: conn, logger: h.logger}, nil
}

type helloConn struct {
	net.Conn
	logger *slog.Logger
	once   sync.Once
	err    error
}

func (c *helloConn) Read(p []byte) (int, error) {
	c.once.Do(func() {
		var got [len(masterHello)]byte
		if _, err := io.ReadFull(c.Conn, got[:]); err != nil {
			c.err = err
			return
		}
		if bytes.Equal(got[:], masterHello[:]) {
			// Answered, so that a dialer learns it was accepted.
			_, c.err = c.Conn.Write(masterHello[:])
			return
		}
		c.err = fmt.Errorf("%w: hello %q from %s, want %q", errMasterVersion, got[:], c.RemoteAddr(), masterHello[:])
		c.logger.Warn("refused a raft connection: the other master runs another version (upgrade every master)", "from", c.RemoteAddr().String(), "hello", fmt.Sprintf("%q", got[:]))
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(p)
}
