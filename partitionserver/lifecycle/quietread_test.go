package lifecycle

import "testing"

func TestQuietRead(t *testing.T) {
	led := &Mark{Term: 4, LastIndex: 20, LastTerm: 4, Applied: 20}
	cases := []struct {
		name      string
		state     State
		mark      *Mark
		wasLeader bool
		served    uint64
		want      QuietReason
	}{
		{"quiet leader at its marker", Quiet, led, true, 0, QuietOK},
		{"open", Active, led, true, 0, NotQuiet},
		{"opening", Opening, led, true, 0, NotQuiet},
		{"closing", Closing, led, true, 0, NotQuiet},
		{"found at start: no mark", Quiet, nil, true, 0, NoMark},
		{"empty log", Quiet, &Mark{Term: 1}, true, 0, NoMark},
		{"was a follower", Quiet, led, false, 0, NotLeader},
		{"last entry of an older term: deposed before closing", Quiet, &Mark{Term: 5, LastIndex: 20, LastTerm: 4, Applied: 20}, true, 0, NotLeader},
		{"state file behind the log", Quiet, &Mark{Term: 4, LastIndex: 20, LastTerm: 4, Applied: 19}, true, 0, NotApplied},
		{"state file past the log (a snapshot)", Quiet, &Mark{Term: 4, LastIndex: 20, LastTerm: 4, Applied: 25}, true, 0, NotApplied},
		{"an entry appended after the marker before the close", Quiet, &Mark{Term: 4, LastIndex: 21, LastTerm: 4, Applied: 21}, true, 0, NotAtMarker},
		{"the last read before the wake", Quiet, led, true, QuietReadsPerWake - 1, QuietOK},
		{"read steadily while quiet: wake", Quiet, led, true, QuietReadsPerWake, Busy},
		{"open, however many were served", Active, led, true, QuietReadsPerWake, NotQuiet},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pos, why := QuietRead(c.state, c.mark, c.wasLeader, 20, c.served)
			if why != c.want {
				t.Fatalf("reason %v, want %v", why, c.want)
			}
			want := Position{}
			if c.want == QuietOK {
				want = Position{Term: 4, LastIndex: 20, LastTerm: 4}
			}
			if pos != want {
				t.Fatalf("position %+v, want %+v", pos, want)
			}
		})
	}
}

func TestConfirmQuiet(t *testing.T) {
	p := Position{Term: 4, LastIndex: 20, LastTerm: 4}
	same := &Mark{Term: 4, LastIndex: 20, LastTerm: 4, Applied: 20}
	live := &OpenView{TermBefore: 4, LastIndex: 20, TermAfter: 4, Live: true}
	cases := []struct {
		name  string
		state State
		mark  *Mark
		open  *OpenView
		pos   Position
		want  bool
	}{
		{"quiet at the same position", Quiet, same, nil, p, true},
		{"quiet, applied below its marker (a follower that closed at it)", Quiet, &Mark{Term: 4, LastIndex: 20, LastTerm: 4, Applied: 19}, nil, p, true},
		{"quiet without a mark", Quiet, nil, nil, p, false},
		{"quiet at a newer term (voted since)", Quiet, &Mark{Term: 5, LastIndex: 20, LastTerm: 4, Applied: 20}, nil, p, false},
		{"quiet with a longer log", Quiet, &Mark{Term: 4, LastIndex: 21, LastTerm: 4, Applied: 21}, nil, p, false},
		{"quiet with a shorter log", Quiet, &Mark{Term: 4, LastIndex: 19, LastTerm: 4, Applied: 19}, nil, p, false},
		{"quiet, last entry of another term", Quiet, &Mark{Term: 4, LastIndex: 20, LastTerm: 3, Applied: 20}, nil, p, false},
		{"quiet, applied past its log (a snapshot)", Quiet, &Mark{Term: 4, LastIndex: 20, LastTerm: 4, Applied: 30}, nil, p, false},
		{"open at the same term and last index", Active, nil, live, p, true},
		{"open, term moved while reading", Active, nil, &OpenView{TermBefore: 4, LastIndex: 20, TermAfter: 5, Live: true}, p, false},
		{"open at a newer term", Active, nil, &OpenView{TermBefore: 5, LastIndex: 20, TermAfter: 5, Live: true}, p, false},
		{"open with a longer log", Active, nil, &OpenView{TermBefore: 4, LastIndex: 21, TermAfter: 4, Live: true}, p, false},
		{"open member closed while reading", Active, nil, &OpenView{TermBefore: 4, LastIndex: 20, TermAfter: 4}, p, false},
		{"active without a view", Active, nil, nil, p, false},
		{"opening", Opening, same, nil, p, false},
		{"closing", Closing, same, nil, p, false},
		{"absent", Absent, nil, nil, p, false},
		{"removing", Removing, same, nil, p, false},
		{"empty position", Quiet, &Mark{}, nil, Position{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ConfirmQuiet(c.state, c.mark, c.open, c.pos); got != c.want {
				t.Fatalf("ConfirmQuiet = %v, want %v", got, c.want)
			}
		})
	}
}

func TestConfirmsNeeded(t *testing.T) {
	cases := []struct {
		voters int
		self   bool
		want   int
		ok     bool
	}{
		{1, true, 0, true},
		{2, true, 1, true},
		{3, true, 1, true},
		{4, true, 2, true},
		{5, true, 2, true},
		{3, false, 0, false},
		{0, true, 0, false},
	}
	for _, c := range cases {
		n, ok := ConfirmsNeeded(c.voters, c.self)
		if n != c.want || ok != c.ok {
			t.Errorf("ConfirmsNeeded(%d, %v) = %d, %v; want %d, %v", c.voters, c.self, n, ok, c.want, c.ok)
		}
	}
}
