package scheduler

import (
	"slices"
	"testing"
	"time"
)

// TestIsolateInFlightOccupiesGroup: an isolate in flight (Op.Group set)
// keeps every range of its anchor group busy, also once the map has the
// range out of the group while the op still runs (the master's detach
// records it, then waits for its leader): a second hot span waits for it,
// since the master's isolate claims the whole group and a second one
// would be refused busy. A busy range of the group holds the group too
// (groupIdle), and an isolate of another group holds nothing here. Fails
// without occupyTransferred counting Isolate: r3 was planned beside the
// running isolate of r2.
func TestIsolateInFlightOccupiesGroup(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	rng := func(id, group, table uint64, eps float64) *Range {
		return &Range{ID: id, Group: group, TableID: table, Table: "t", Leader: "a", Anchor: id == 1,
			Replicas: []Replica{{Server: "a"}, {Server: "b"}, {Server: "c"}},
			Load:     &Load{EntitiesPerSec: eps}, Trend: Trend{WarmSince: now.Add(-10 * time.Second)}}
	}
	for _, tc := range []struct {
		name     string
		r2Group  uint64
		inflight []Op
		want     []uint64 // ranges isolated
	}{
		{"nothing in flight", 1, nil, []uint64{2}},
		{"an isolate of r2 in flight", 1, []Op{{Kind: Isolate, Range: 2, Group: 1, At: now}}, nil},
		{"an isolate of r2 in flight, r2 out of the group in the map", 0, []Op{{Kind: Isolate, Range: 2, Group: 1, At: now}}, nil},
		{"r2 out of the group, nothing in flight", 0, nil, []uint64{3}},
		{"an isolate of another group in flight", 1, []Op{{Kind: Isolate, Range: 9, Group: 8, At: now}}, []uint64{2}},
		{"r2 busy", 1, []Op{{Kind: TransferLeader, Range: 2, At: now}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := &Snapshot{Now: now, Slots: 4, InFlight: tc.inflight,
				Servers: []Server{{ID: "a", Live: true}, {ID: "b", Live: true}, {ID: "c", Live: true}},
				Ranges:  []*Range{rng(1, 1, 10, 0), rng(2, tc.r2Group, 11, 800), rng(3, 1, 12, 700)}}
			var got []uint64
			for _, o := range Schedule(DefaultConfig(), snap) {
				if o.Kind == Isolate {
					got = append(got, o.Range)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("isolated %v, want %v", got, tc.want)
			}
		})
	}
}
