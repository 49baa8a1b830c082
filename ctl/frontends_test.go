package ctl

import (
	"errors"
	"slices"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestMergeFrontends: one record per front-end id over the masters'
// answers, its newest watch (a leader's on a tie), failed answers left
// out, sorted by id, how far behind the master's version.
func TestMergeFrontends(t *testing.T) {
	watch := func(id string, connected int64, sent uint64) *pb.WatchingFrontend {
		return &pb.WatchingFrontend{Frontend: &pb.FrontendInfo{Id: id}, ConnectedUnixNano: connected, MapVersionSent: sent}
	}
	answer := func(addr, self string, leader bool, version uint64, ws ...*pb.WatchingFrontend) frontendAnswer {
		return frontendAnswer{addr: addr, resp: &pb.ListFrontendsResponse{SelfId: self, Leader: leader, MapVersion: version, Frontends: ws}}
	}
	type row struct {
		id, master string
		behind     uint64
	}
	for _, tc := range []struct {
		name    string
		answers []frontendAnswer
		want    []row
	}{
		{"none", nil, []row{}},
		{"one master", []frontendAnswer{answer("a:1", "m1", true, 9, watch("fe2", 5, 9), watch("fe1", 5, 7))},
			[]row{{"fe1", "m1", 2}, {"fe2", "m1", 0}}},
		{"leader change: the newest watch", []frontendAnswer{
			answer("a:1", "m1", false, 40, watch("fe1", 5, 40)),
			answer("a:2", "m2", true, 3, watch("fe1", 8, 3)),
		}, []row{{"fe1", "m2", 0}}},
		{"tie: the leader's", []frontendAnswer{
			answer("a:1", "m1", false, 4, watch("fe1", 5, 4)),
			answer("a:2", "m2", true, 4, watch("fe1", 5, 4)),
		}, []row{{"fe1", "m2", 0}}},
		{"a master that failed", []frontendAnswer{
			{addr: "a:1", err: errors.New("down")},
			answer("a:2", "m2", true, 4, watch("fe1", 5, 4)),
		}, []row{{"fe1", "m2", 0}}},
		{"sent ahead of a restarted master's count", []frontendAnswer{answer("a:1", "m1", true, 2, watch("fe1", 5, 4))},
			[]row{{"fe1", "m1", 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := []row{}
			for _, f := range mergeFrontends(tc.answers) {
				got = append(got, row{f.ID, f.Master, f.MapVersionsBehind})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("merged %v, want %v", got, tc.want)
			}
		})
	}
}
