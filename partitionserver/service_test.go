package partitionserver

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"

	"tablestore/internal/rpcerr"
)

// TestToStatusNotApplied: a write refused before it was proposed is
// "server busy, retry" (Azure's 503 ServerBusy with Retry-After), not an
// unknown outcome.
func TestToStatusNotApplied(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
	}{
		{"transfer in progress", fmt.Errorf("%w: %v", ErrBusy, raft.ErrLeadershipTransferInProgress), codes.Unavailable, rpcerr.ReasonServerBusy},
		{"apply queue full", fmt.Errorf("%w: %v", ErrBusy, raft.ErrEnqueueTimeout), codes.Unavailable, rpcerr.ReasonServerBusy},
		{"not leader", ErrNotLeader, codes.Unavailable, rpcerr.ReasonNotLeader},
		{"outcome unknown", fmt.Errorf("%w: x", ErrUnknownOutcome), codes.DeadlineExceeded, rpcerr.ReasonUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info := rpcerr.Parse(toStatus(nil, c.err))
			if info.Code != c.code || info.Reason != c.reason {
				t.Fatalf("got %v/%s, want %v/%s", info.Code, info.Reason, c.code, c.reason)
			}
			if c.reason == rpcerr.ReasonServerBusy && info.Metadata[rpcerr.MetaRetryAfterMs] == "" {
				t.Fatal("ServerBusy without a retry delay")
			}
		})
	}
	if !errors.Is(fmt.Errorf("%w: y", ErrBusy), ErrBusy) {
		t.Fatal("ErrBusy does not wrap")
	}
}
