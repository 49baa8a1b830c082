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
