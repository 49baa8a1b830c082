package scheduler

import (
	"slices"
	"testing"
	"time"
)

// TestAttachInFlight: an attach in flight holds what it uses while it
// runs. Its co-location moves (the range's replicas onto the group's
// servers) count against max-per-server as a merge's do, so r8, whose
// attach would put a replica on c and take one off d, waits while r9's
// attach moves one onto c and off d; and the group it joins is busy
// (Op.Ranges: the anchor; occupyTransferred: its spans). Fails without
// colocating counting Attach (r8 was planned beside r9's co-location).
func TestAttachInFlight(t *testing.T) {
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	rng := func(id, group, table uint64, leader string, servers ...string) *Range {
		r := &Range{ID: id, Group: group, TableID: table, Table: "t", Leader: leader, Anchor: id == group && table < 20,
			Load: &Load{EntitiesPerSec: 5, Bytes: 1 << 20}, Trend: Trend{ColdSince: now.Add(-2 * time.Minute)}}
		for _, s := range servers {
			r.Replicas = append(r.Replicas, Replica{Server: s})
		}
		return r
	}
	cfg := DefaultConfig()
	cfg.AttachCold, cfg.AnchorGroupSpans, cfg.BalanceLeaders, cfg.BalanceReplicas = true, 4, false, false
	for _, tc := range []struct {
		name     string
		r9       []string
		inflight []Op
		want     []uint64 // ranges attached
	}{
		{"nothing in flight", []string{"a", "b", "d"}, nil, []uint64{8}},
		{"r9's attach co-locating onto c", []string{"a", "b", "d"}, []Op{{Kind: Attach, Range: 9, Group: 5, At: now}}, nil},
		{"r9's attach, co-located already", []string{"b", "c", "a"}, []Op{{Kind: Attach, Range: 9, Group: 5, At: now}}, []uint64{8}},
		{"r9's attach to group 1", []string{"a", "b", "c"}, []Op{{Kind: Attach, Range: 9, Group: 1, At: now}}, []uint64{8}},
		{"r9's attach to group 1 and 5", []string{"a", "b", "c"}, []Op{{Kind: Attach, Range: 9, Group: 1, At: now}, {Kind: Attach, Range: 7, Group: 5, At: now}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var servers []Server
			for _, s := range []string{"a", "b", "c", "d"} {
				servers = append(servers, Server{ID: s, Live: true, LastSeen: now, AttachSpans: true})
			}
			snap := &Snapshot{Now: now, Slots: 4, InFlight: tc.inflight, Servers: servers,
				Ranges: []*Range{rng(1, 1, 10, "a", "a", "b", "c"), rng(2, 1, 11, "a", "a", "b", "c"),
					rng(5, 5, 13, "b", "b", "c", "a"), rng(8, 0, 20, "a", "a", "b", "d"), rng(9, 0, 21, tc.r9[0], tc.r9...)}}
			var got []uint64
			for _, o := range Schedule(cfg, snap) {
				if o.Kind == Attach {
					got = append(got, o.Range)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("attached %v, want %v", got, tc.want)
			}
		})
	}
}
