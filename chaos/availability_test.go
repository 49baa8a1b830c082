package chaos

import (
	"testing"
	"time"
)

func TestMajorityUpPart(t *testing.T) {
	s := func(d float64) time.Duration { return time.Duration(d * float64(time.Second)) }
	masters := []string{"m1", "m2", "m3"}
	// p00-p07 on ps1, ps2, ps3; p08- on ps2, ps3, ps4.
	places := []placement{{at: 0, ranges: []span{
		{start: "", end: "p08", servers: []string{"ps1", "ps2", "ps3"}},
		{start: "p08", end: "", servers: []string{"ps2", "ps3", "ps4"}},
	}}}
	// From 5 s a move puts p08- on ps1, ps3, ps4.
	moved := append(places, placement{at: s(5), ranges: []span{
		{start: "", end: "p08", servers: []string{"ps1", "ps2", "ps3"}},
		{start: "p08", end: "", servers: []string{"ps1", "ps3", "ps4"}},
	}})
	tests := []struct {
		name   string
		gap    writeGap
		events []roleEvent
		places []placement
		want   time.Duration
	}{
		{"no fault: the whole gap counts", writeGap{"p01", s(1), s(4)}, nil, places, s(3)},
		{"one replica down: majority up", writeGap{"p01", s(1), s(4)},
			[]roleEvent{{s(0.5), "ps1", flagDown, true}}, places, s(3)},
		{"two replicas impaired for a second: the longer side counts", writeGap{"p01", s(1), s(6)},
			[]roleEvent{{s(0.5), "ps1", flagDown, true}, {s(2), "ps2", flagStopped, true}, {s(3), "ps2", flagStopped, false}},
			places, s(3)},
		{"impaired servers hold no replica of the key's range", writeGap{"p01", s(1), s(4)},
			[]roleEvent{{s(0), "ps4", flagDown, true}, {s(0), "m1", flagIsolated, true}}, places, s(3)},
		{"two masters impaired: nothing counts", writeGap{"p09", s(1), s(3)},
			[]roleEvent{{s(0), "m1", flagDown, true}, {s(0), "m2", flagIsolated, true}}, places, 0},
		{"a flag cleared while another stays set keeps the role impaired", writeGap{"p09", s(1), s(3)},
			[]roleEvent{{s(0), "ps2", flagDown, true}, {s(0), "ps2", flagIsolated, true}, {s(0.5), "ps2", flagIsolated, false},
				{s(0), "ps3", flagStopped, true}}, places, 0},
		{"placement changes inside the gap", writeGap{"p09", s(4), s(8)},
			[]roleEvent{{s(0), "ps1", flagDown, true}, {s(0), "ps4", flagDown, true}}, moved, s(1)},
		{"key before the first placement uses it", writeGap{"p09", s(0), s(1)},
			[]roleEvent{{s(0), "ps2", flagDown, true}}, []placement{{at: s(2), ranges: places[0].ranges}}, s(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := majorityUpPart(tc.gap, tc.events, tc.places, masters)
			if d := got - tc.want; d < -gapStep || d > gapStep {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
