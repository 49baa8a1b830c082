package partitionserver

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// TestFreezeMatches: MergeRange proposes only when the leader's replica
// of the right range is frozen at exactly the merge's freeze, over the
// span it names; anything else is refused as NOT_READY before proposing
// (fsm applyMerge would stop every replica of the left range).
func TestFreezeMatches(t *testing.T) {
	right := &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m"}
	tests := []struct {
		name string
		st   *pb.RangeState
		ok   bool
	}{
		{"frozen at the freeze", &pb.RangeState{Range: right, Frozen: true, FrozenIndex: 9, AppliedIndex: 9}, true},
		{"unfrozen after an abort", &pb.RangeState{Range: right, AppliedIndex: 12}, false},
		{"frozen again, later", &pb.RangeState{Range: right, Frozen: true, FrozenIndex: 14, AppliedIndex: 14}, false},
		{"frozen earlier", &pb.RangeState{Range: right, Frozen: true, FrozenIndex: 5, AppliedIndex: 9}, false},
		{"another span", &pb.RangeState{Range: &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "n"}, Frozen: true, FrozenIndex: 9, AppliedIndex: 9}, false},
	}
	for _, tt := range tests {
		err := freezeMatches(tt.st, right, 9)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrFreezeMismatch)) {
			t.Errorf("%s: %v, want ok=%v or ErrFreezeMismatch", tt.name, err, tt.ok)
		}
		if err == nil {
			continue
		}
		st := toStatus(nil, err)
		if status.Code(st) != codes.FailedPrecondition || rpcerr.Parse(st).Reason != rpcerr.ReasonNotReady {
			t.Errorf("%s: status %v, want FailedPrecondition NOT_READY", tt.name, st)
		}
	}
}

// TestColocated: MergeRange proposes only when every member of the left
// range (its descriptor's replicas and its Raft configuration's servers)
// is on a server the right range's freeze lists; anything else is refused
// as NOT_READY before proposing (fsm applyMerge on a member without the
// right range's replica beside it panics, or waits for ever on one that
// left the right range before the freeze).
func TestColocated(t *testing.T) {
	right := &pb.RangeDescriptor{RangeId: 2, TableId: 7, Start: "m",
		Replicas: []*pb.Replica{{ServerId: "a"}, {ServerId: "b"}, {ServerId: "d"}}}
	tests := []struct {
		name    string
		members []string
		ok      bool
	}{
		{"the same servers", []string{"a", "b", "d"}, true},
		{"fewer than the right range", []string{"a", "d"}, true},
		{"one beside no replica of the right range", []string{"a", "b", "c"}, false},
		{"an extra member (a non-voter, say)", []string{"a", "b", "d", "c"}, false},
		{"none", nil, true},
	}
	for _, tt := range tests {
		err := colocated(1, tt.members, right)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrNotColocated)) {
			t.Errorf("%s: %v, want ok=%v or ErrNotColocated", tt.name, err, tt.ok)
		}
		if err == nil {
			continue
		}
		st := toStatus(nil, err)
		if status.Code(st) != codes.FailedPrecondition || rpcerr.Parse(st).Reason != rpcerr.ReasonNotReady {
			t.Errorf("%s: status %v, want FailedPrecondition NOT_READY", tt.name, st)
		}
	}
}
