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

func TestWaits(t *testing.T) {
	s := func(d float64) time.Duration { return time.Duration(d * float64(time.Second)) }
	type step struct {
		begin bool
		at    float64
		ok    bool
	}
	tests := []struct {
		name  string
		steps []step
		want  []writeGap // the windows the successes close
	}{
		{"one write: from its start", []step{{true, 1, false}, {false, 1.2, true}}, []writeGap{{"k", s(1), s(1.2)}}},
		{"time without an attempt is not counted", []step{{true, 1, false}, {false, 1.1, true}, {true, 5, false}, {false, 5.3, true}},
			[]writeGap{{"k", s(1), s(1.1)}, {"k", s(5), s(5.3)}}},
		{"a failed attempt keeps the window open", []step{{true, 1, false}, {false, 3, false}, {true, 4, false}, {false, 4.5, true}},
			[]writeGap{{"k", s(1), s(4.5)}}},
		{"overlapping attempts: a success ends the window, the other opens the next", []step{
			{true, 1, false}, {true, 2, false}, {false, 3, true}, {false, 6, true}},
			[]writeGap{{"k", s(1), s(3)}, {"k", s(3), s(6)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWaits()
			var got []writeGap
			for _, st := range tc.steps {
				if st.begin {
					w.begin("k", s(st.at))
				} else if g, ok := w.end("k", s(st.at), st.ok); ok {
					got = append(got, g)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("windows %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("windows %v, want %v", got, tc.want)
				}
			}
		})
	}
}
