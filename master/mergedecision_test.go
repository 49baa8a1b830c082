package master

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

const (
	commit = pb.MergeOutcome_MERGE_OUTCOME_COMMIT
	abort  = pb.MergeOutcome_MERGE_OUTCOME_ABORT
)

// decide applies a MERGE_DECISION for range 2 as the FSM would.
func decide(t *testing.T, s *state, index uint64, o pb.MergeOutcome) *applyResult {
	t.Helper()
	payload, err := proto.Marshal(&pb.MergeDecisionCommand{Decision: &pb.MergeDecision{RightRangeId: 2, FreezeIndex: index, Outcome: o}})
	if err != nil {
		t.Fatal(err)
	}
	return handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_MERGE_DECISION](s, payload)
}

// TestMergeDecisionIsFinal scripts proposals of merge decisions: the first
// recorded for a freeze stands, also after a snapshot; a proposal for an
// earlier freeze than the recorded one answers ABORT (the range could only
// have frozen again after that freeze was aborted).
func TestMergeDecisionIsFinal(t *testing.T) {
	type step struct {
		index uint64
		prop  pb.MergeOutcome
		want  pb.MergeOutcome
		rec   bool // recorded by this step (merge_aborts_total counts those)
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"commit stands against a later abort", []step{{10, commit, commit, true}, {10, abort, commit, false}, {10, commit, commit, false}}},
		{"abort stands against a later commit", []step{{10, abort, abort, true}, {10, commit, abort, false}}},
		{"a repeated abort is recorded once", []step{{10, abort, abort, true}, {10, abort, abort, false}}},
		{"a new freeze gets its own decision", []step{{10, abort, abort, true}, {15, commit, commit, true}, {15, abort, commit, false}}},
		{"an earlier freeze than the recorded one is aborted", []step{{10, abort, abort, true}, {15, abort, abort, true}, {10, commit, abort, false}, {15, commit, abort, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState()
			s.putRange(&pb.RangeDescriptor{RangeId: 2, TableId: 1, Start: "m"})
			for i, st := range tt.steps {
				if i == len(tt.steps)-1 {
					s = stateFromSnapshot(s.snapshot()) // the record survives a snapshot
				}
				res := decide(t, s, st.index, st.prop)
				if res.err != nil {
					t.Fatalf("step %d: %v", i, res.err)
				}
				if got := res.decision.GetOutcome(); got != st.want || res.decision.GetFreezeIndex() != st.index {
					t.Fatalf("step %d: proposed %v at %d, recorded %v at %d, want %v", i, st.prop, st.index, got, res.decision.GetFreezeIndex(), st.want)
				}
				if res.recorded != st.rec {
					t.Fatalf("step %d: recorded = %v, want %v", i, res.recorded, st.rec)
				}
				if got, ok := s.mergeDecision(2, st.index); !ok || got != st.want {
					t.Fatalf("step %d: lookup = %v %v, want %v", i, got, ok, st.want)
				}
			}
		})
	}
}

func TestMergeDecisionRefusals(t *testing.T) {
	s := newState()
	if res := decide(t, s, 10, commit); !errors.Is(res.err, ErrRangeNotFound) {
		t.Fatalf("decision for an unknown range = %v, want ErrRangeNotFound", res.err)
	}
	s.putRange(&pb.RangeDescriptor{RangeId: 2, TableId: 1, Start: "m"})
	for _, tc := range []struct {
		index uint64
		o     pb.MergeOutcome
	}{{0, commit}, {10, pb.MergeOutcome_MERGE_OUTCOME_UNSPECIFIED}} {
		if res := decide(t, s, tc.index, tc.o); !errors.Is(res.err, ErrBadCommand) {
			t.Fatalf("decision %v at %d = %v, want ErrBadCommand", tc.o, tc.index, res.err)
		}
	}
	if _, ok := s.mergeDecision(2, 10); ok {
		t.Fatal("a refused decision was recorded")
	}
	// The record goes with the range (a merge removes it).
	decide(t, s, 10, commit)
	s.dropRange(2)
	if len(s.mergeDecisions) != 0 {
		t.Fatalf("decisions of a removed range kept: %v", s.mergeDecisions)
	}
}

// TestAbortedThrough: the freezes a replica delete may treat as aborted
// (DeleteReplicaRequest.aborted_through) follow the recorded decision.
func TestAbortedThrough(t *testing.T) {
	tests := []struct {
		name  string
		steps []struct {
			index uint64
			o     pb.MergeOutcome
		}
		want uint64
	}{
		{"no decision", nil, 0},
		{"an aborted freeze", []struct {
			index uint64
			o     pb.MergeOutcome
		}{{10, abort}}, 10},
		{"a committed freeze: only the earlier ones", []struct {
			index uint64
			o     pb.MergeOutcome
		}{{10, abort}, {15, commit}}, 14},
		{"aborted twice", []struct {
			index uint64
			o     pb.MergeOutcome
		}{{10, abort}, {15, abort}}, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState()
			s.putRange(&pb.RangeDescriptor{RangeId: 2, TableId: 1, Start: "m"})
			for _, st := range tt.steps {
				decide(t, s, st.index, st.o)
			}
			if got := s.abortedThrough(2); got != tt.want {
				t.Fatalf("abortedThrough = %d, want %d", got, tt.want)
			}
		})
	}
}
