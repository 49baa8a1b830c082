package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The appended body must be the entity the map-marshalled one was.
func TestBodyIsTheEntity(t *testing.T) {
	e := &env{payload: strings.Repeat("x", 924)}
	e.tail = entityTail(e.payload)
	for _, k := range [][2]string{{"p0001", "m03-000000017"}, {"hot", "w31-000123456"}, {"", ""}} {
		var got map[string]any
		if err := json.Unmarshal(e.body(k[0], k[1]), &got); err != nil {
			t.Fatalf("body(%q, %q) is not JSON: %v", k[0], k[1], err)
		}
		want := map[string]any{"PartitionKey": k[0], "RowKey": k[1], "Payload": e.payload, "N": float64(42),
			"When": "2024-01-02T03:04:05Z", "When@odata.type": "Edm.DateTime"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("body(%q, %q) = %v, want %v", k[0], k[1], got, want)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{1}, 1}, {[]float64{1, 3}, 2}, {[]float64{0.8, 0.9, 1.2}, 0.9}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// Four ranges over three servers: each server leads one, the first leads
// the fourth too, whatever order the master lists the replicas in.
func TestSpreadLeader(t *testing.T) {
	reps := []string{"ps3", "ps1", "ps2"}
	var got []string
	for k := 0; k < 4; k++ {
		got = append(got, spreadLeader(k, reps))
	}
	if want := []string{"ps1", "ps2", "ps3", "ps1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("leaders %v, want %v", got, want)
	}
	if reps[0] != "ps3" {
		t.Errorf("spreadLeader reordered its argument: %v", reps)
	}
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{"spread", []string{"ps1", "ps2", "ps3", "ps1"}},
		{"one", []string{"ps1", "ps1", "ps1", "ps1"}},
		{"group", []string{"", "", "", ""}}, // whoever leads the group
		// Spans 0 and 1 stay in the group ps2 leads; 2 and 3 leave it,
		// one for each other replica.
		{"groups", []string{"", "", "ps1", "ps3"}},
	} {
		var got []string
		for k := 0; k < 4; k++ {
			got = append(got, presplitLeader(tc.policy, k, 4, reps, "ps2"))
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("-presplit-leaders %s: leaders %v, want %v", tc.policy, got, tc.want)
		}
	}
	rs := []rangeInfo{{RangeID: 1, Leader: "ps1"}, {RangeID: 2, Group: 1, Leader: ""}, {RangeID: 3, Leader: "ps3"}}
	if line := layoutLine(rs); line != "3 ranges in 2 Raft groups, leaders ps1 none ps3" {
		t.Errorf("layoutLine = %q", line)
	}
}

func TestGroupsLine(t *testing.T) {
	tests := []struct {
		name string
		rs   []rangeInfo
		want string
	}{
		{"none", nil, "0 ranges in 0 Raft groups ()"},
		{"a group of its own each", []rangeInfo{{RangeID: 4, Leader: "ps2"}, {RangeID: 5}},
			"2 ranges in 2 Raft groups (1 led by none, 1 led by ps2)"},
		{"spans of anchor groups, largest first", []rangeInfo{
			{RangeID: 4, Group: 2, Leader: "ps1"}, {RangeID: 5, Group: 3, Leader: "ps2"},
			{RangeID: 6, Group: 2, Leader: "ps1"}, {RangeID: 7, Group: 3, Leader: "ps2"},
			{RangeID: 8, Group: 2, Leader: "ps1"}, {RangeID: 9, Leader: "ps3"}},
			"6 ranges in 3 Raft groups (3 led by ps1, 2 led by ps2, 1 led by ps3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := groupsLine(tt.rs); got != tt.want {
				t.Errorf("groupsLine = %q, want %q", got, tt.want)
			}
		})
	}
	many := make([]rangeInfo, 10)
	for i := range many {
		many[i] = rangeInfo{RangeID: uint64(10 + i), Leader: "ps1"}
	}
	if got, want := groupsLine(many), "10 ranges in 10 Raft groups (1 led by ps1, 1 led by ps1, 1 led by ps1, 1 led by ps1, 1 led by ps1, 1 led by ps1, 1 led by ps1, 1 led by ps1, and 2 more)"; got != want {
		t.Errorf("groupsLine of 10 = %q, want %q", got, want)
	}
}
