package lease

import (
	"errors"
	"testing"
	"time"
)

const d = 250 * time.Millisecond

var t0 = time.Unix(1_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// step is one line of a follower's script: an append answered at ms (the
// promise it gave is checked), or a request admitted at ms.
type step struct {
	ms      int
	append  string // leader of a successful append ("" for a request)
	term    uint64
	promise bool // for an append: whether it carries a promise
	req     *Request
	want    error // for a request
	begin   bool  // for an admitted request: it stays pending
	end     bool  // end the pending request first
}

func TestVoterScripts(t *testing.T) {
	started := at(-1000)
	cases := []struct {
		name  string
		steps []step
	}{
		{"first append after silence gives no promise, the next does", []step{
			{ms: 0, append: "a", term: 1, promise: false},
			{ms: 50, append: "a", term: 1, promise: true},
			{ms: 100, append: "a", term: 1, promise: true},
		}},
		{"an append after more than the fresh window gives none", []step{
			{ms: 0, append: "a", term: 1},
			{ms: 50, append: "a", term: 1, promise: true},
			{ms: 400, append: "a", term: 1, promise: false},
			{ms: 450, append: "a", term: 1, promise: true},
		}},
		{"promised: other candidates' votes and pre-votes refused, the leader's own admitted", []step{
			{ms: 0, append: "a", term: 3},
			{ms: 50, append: "a", term: 3, promise: true},
			{ms: 100, req: &Request{Kind: Vote, From: "b"}, want: ErrPromised},
			{ms: 100, req: &Request{Kind: PreVote, From: "b"}, want: ErrPromised},
			{ms: 100, req: &Request{Kind: Vote, From: "a"}},
			{ms: 299, req: &Request{Kind: Vote, From: "b"}, want: ErrPromised},
			{ms: 300, req: &Request{Kind: Vote, From: "b"}},
		}},
		{"a transfer vote passes only with the promised leader's token of the promised term", []step{
			{ms: 0, append: "a", term: 3},
			{ms: 50, append: "a", term: 3, promise: true},
			{ms: 60, req: &Request{Kind: Vote, From: "b", Transfer: true}, want: ErrPromised},
			{ms: 60, req: &Request{Kind: Vote, From: "b", Transfer: true, Token: Token{"a", 2}}, want: ErrPromised},
			{ms: 60, req: &Request{Kind: Vote, From: "b", Transfer: true, Token: Token{"c", 3}}, want: ErrPromised},
			{ms: 60, req: &Request{Kind: Vote, From: "b", Transfer: false, Token: Token{"a", 3}}, want: ErrPromised},
			{ms: 60, req: &Request{Kind: Vote, From: "b", Transfer: true, Token: Token{"a", 3}}},
		}},
		{"a TimeoutNow passes only from the promised leader with its term; a campaign never while promised", []step{
			{ms: 0, append: "a", term: 3},
			{ms: 50, append: "a", term: 3, promise: true},
			{ms: 60, req: &Request{Kind: TimeoutNow, From: "a", Token: Token{"a", 2}}, want: ErrPromised},
			{ms: 60, req: &Request{Kind: TimeoutNow, From: "c", Token: Token{"c", 3}}, want: ErrPromised},
			{ms: 60, req: &Request{Kind: TimeoutNow}, want: ErrPromised},
			{ms: 60, req: &Request{Kind: TimeoutNow, From: "a", Token: Token{"a", 3}}},
			{ms: 301, req: &Request{Kind: TimeoutNow}},
		}},
		{"no promise while an admitted vote is pending", []step{
			{ms: 0, append: "a", term: 3},
			{ms: 50, append: "a", term: 3, promise: true},
			{ms: 400, req: &Request{Kind: Vote, From: "b"}, term: 3, begin: true},
			{ms: 410, append: "a", term: 3, promise: false},
			{ms: 420, append: "a", term: 3, promise: false},
			{ms: 430, end: true, append: "a", term: 3, promise: true},
		}},
		{"no promise to an older term than an admitted vote's, once it ended", []step{
			{ms: 0, append: "a", term: 3},
			{ms: 50, append: "a", term: 3, promise: true},
			{ms: 400, req: &Request{Kind: Vote, From: "b"}, term: 4, begin: true},
			{ms: 410, end: true, append: "a", term: 3, promise: false},
			{ms: 420, append: "a", term: 3, promise: false},
			{ms: 430, append: "b", term: 4, promise: true},
		}},
		{"no promise within the campaign window of an admitted TimeoutNow", []step{
			{ms: 0, append: "a", term: 3},
			{ms: 50, append: "a", term: 3, promise: true},
			{ms: 400, req: &Request{Kind: TimeoutNow}, begin: true},
			{ms: 410, end: true, append: "a", term: 3, promise: false},
			{ms: 3350, append: "a", term: 3, promise: false},
			{ms: 3390, append: "a", term: 3, promise: false},
			{ms: 3410, append: "a", term: 3, promise: true},
		}},
		{"a newer leader's promise replaces the old one", []step{
			{ms: 0, append: "a", term: 3},
			{ms: 50, append: "a", term: 3, promise: true},
			{ms: 100, append: "b", term: 4, promise: true},
			{ms: 110, req: &Request{Kind: Vote, From: "a"}, want: ErrPromised},
			{ms: 110, req: &Request{Kind: Vote, From: "b"}},
		}},
		{"an older term's append gets no promise over a live one", []step{
			{ms: 0, append: "b", term: 4},
			{ms: 50, append: "b", term: 4, promise: true},
			{ms: 60, append: "a", term: 3, promise: false},
			{ms: 70, req: &Request{Kind: Vote, From: "c"}, want: ErrPromised},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v Voter
			for i, s := range c.steps {
				if s.end {
					v.End()
				}
				if s.req != nil {
					err := v.Admit(at(s.ms), started, d, *s.req)
					if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
						t.Fatalf("step %d (%+v): Admit = %v, want %v", i, s.req, err, s.want)
					}
					if err == nil && s.begin {
						v.Begin(*s.req, s.term, at(s.ms))
					}
					continue
				}
				if got := v.Promise(at(s.ms), at(s.ms), s.append, s.term, d, d); got != s.promise {
					t.Fatalf("step %d: Promise(%s, term %d) at %d ms = %v, want %v", i, s.append, s.term, s.ms, got, s.promise)
				}
			}
		})
	}
}

func TestVoterRefusesEverythingRightAfterStart(t *testing.T) {
	var v Voter
	started := at(0)
	for _, req := range []Request{{Kind: PreVote, From: "b"}, {Kind: Vote, From: "b", Transfer: true}, {Kind: TimeoutNow}} {
		if err := v.Admit(at(249), started, d, req); !errors.Is(err, ErrStarting) {
			t.Errorf("%+v at 249 ms after start: %v, want ErrStarting", req, err)
		}
		if err := v.Admit(at(250), started, d, req); err != nil {
			t.Errorf("%+v at 250 ms after start: %v, want admitted", req, err)
		}
	}
}

func TestTrackerHeld(t *testing.T) {
	voters := []string{"a", "b", "c"}
	limit := int(float64(d/time.Millisecond) * LeaderShare) // 200 ms
	cases := []struct {
		name string
		acks []struct {
			peer string
			term uint64
			ms   int
		}
		term   uint64
		voters []string
		self   string
		ms     int
		off    uint64
		want   bool
	}{
		{name: "no acks", term: 2, voters: voters, self: "a", ms: 10, want: false},
		{name: "one follower within the share", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 2, 0}}, term: 2, voters: voters, self: "a", ms: limit - 1, want: true},
		{name: "one follower at the share's end", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 2, 0}}, term: 2, voters: voters, self: "a", ms: limit, want: false},
		{name: "acks of an older term", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 1, 0}, {"c", 1, 0}}, term: 2, voters: voters, self: "a", ms: 10, want: false},
		{name: "a newer term's ack drops the older ones", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 2, 0}, {"c", 3, 0}}, term: 2, voters: voters, self: "a", ms: 10, want: false},
		{name: "an ack from a non-voter does not count", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"x", 2, 0}}, term: 2, voters: voters, self: "a", ms: 10, want: false},
		{name: "five voters need two followers", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 2, 0}}, term: 2, voters: []string{"a", "b", "c", "d", "e"}, self: "a", ms: 10, want: false},
		{name: "five voters, two followers", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 2, 0}, {"d", 2, 5}}, term: 2, voters: []string{"a", "b", "c", "d", "e"}, self: "a", ms: 10, want: true},
		{name: "a leader outside its configuration", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 2, 0}, {"c", 2, 0}}, term: 2, voters: []string{"b", "c"}, self: "a", ms: 10, want: false},
		{name: "disabled in the term", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 2, 0}}, term: 2, voters: voters, self: "a", ms: 10, off: 2, want: false},
		{name: "disabled in an earlier term only", acks: []struct {
			peer string
			term uint64
			ms   int
		}{{"b", 3, 0}}, term: 3, voters: voters, self: "a", ms: 10, off: 2, want: true},
		{name: "single voter", term: 2, voters: []string{"a"}, self: "a", ms: 10, want: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tr Tracker
			for _, a := range c.acks {
				tr.Ack(a.peer, a.term, at(a.ms), d, d)
			}
			if c.off > 0 {
				tr.Disable(c.off)
			}
			if got := tr.Held(at(c.ms), c.term, c.self, c.voters); got != c.want {
				t.Fatalf("Held = %v, want %v", got, c.want)
			}
		})
	}
}

// A follower's receipt time, not its answer's, decides freshness: one that
// stalled between receiving the last append and answering it (its raft
// counted the contact at receipt) gives no promise on the next.
func TestVoterFreshnessFromReceipt(t *testing.T) {
	var v Voter
	v.Promise(at(0), at(0), "a", 1, d, d)
	// Received at 10 ms, answered after a 400 ms stall.
	v.Promise(at(410), at(10), "a", 1, d, d)
	if v.Promise(at(420), at(415), "a", 1, d, d) {
		t.Fatal("promised 410 ms after the last receipt before it")
	}
	if !v.Promise(at(470), at(465), "a", 1, d, d) {
		t.Fatal("no promise 55 ms after the last receipt")
	}
}

// A follower promising less than the leader's own duration is counted
// for LeaderShare of its own.
func TestTrackerCountsTheShorterPromise(t *testing.T) {
	var tr Tracker
	tr.Ack("b", 2, at(0), 100*time.Millisecond, d)
	voters := []string{"a", "b", "c"}
	if !tr.Held(at(79), 2, "a", voters) || tr.Held(at(80), 2, "a", voters) {
		t.Fatal("a 100 ms promise should count for 80 ms")
	}
}

// TestVoterIdle: a Voter is idle only when no promise runs, nothing it
// admitted is unanswered and no campaign window is open; forgetting one
// that is not idle would let a Voter made afresh admit what it refuses.
func TestVoterIdle(t *testing.T) {
	started := at(-1000)
	promised := func() *Voter {
		v := &Voter{}
		v.Promise(at(0), at(0), "a", 1, d, d)
		if !v.Promise(at(10), at(10), "a", 1, d, d) {
			t.Fatal("no promise")
		}
		return v
	}
	cases := []struct {
		name string
		v    func() *Voter
		now  time.Time
		want bool
	}{
		{"zero", func() *Voter { return &Voter{} }, at(0), true},
		{"promise running", promised, at(10 + 249), false},
		{"promise run out", promised, at(10 + 250), true},
		{"vote unanswered", func() *Voter {
			v := &Voter{}
			v.Begin(Request{Kind: Vote, From: "b"}, 2, at(0))
			return v
		}, at(10_000), false},
		{"vote answered", func() *Voter {
			v := &Voter{}
			v.Begin(Request{Kind: Vote, From: "b"}, 2, at(0))
			v.End()
			return v
		}, at(0), true},
		{"campaign window open", func() *Voter {
			v := &Voter{}
			v.Begin(Request{Kind: TimeoutNow}, 0, at(0))
			v.End()
			return v
		}, at(0).Add(CampaignWindow - time.Millisecond), false},
		{"campaign window closed", func() *Voter {
			v := &Voter{}
			v.Begin(Request{Kind: TimeoutNow}, 0, at(0))
			v.End()
			return v
		}, at(0).Add(CampaignWindow), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.v()
			if got := v.Idle(tc.now); got != tc.want {
				t.Fatalf("Idle = %v, want %v", got, tc.want)
			}
			if !tc.want {
				return
			}
			// Idle: from now on it decides as a Voter that promised nothing.
			fresh := &Voter{}
			for _, req := range []Request{{Kind: PreVote, From: "c"}, {Kind: Vote, From: "c"}, {Kind: TimeoutNow}} {
				if got, want := v.Admit(tc.now, started, d, req), fresh.Admit(tc.now, started, d, req); !errors.Is(got, want) {
					t.Fatalf("Admit(%+v) = %v, a fresh Voter's %v", req, got, want)
				}
			}
		})
	}
}

// A leadership check counts only answers to requests sent at or after it
// began, in the term it checks, from a quorum of the latest configuration
// with the leader in it.
func TestTrackerHeardSince(t *testing.T) {
	type answer struct {
		peer string
		term uint64
		ms   int // when the answered request was sent
	}
	voters := []string{"a", "b", "c"}
	cases := []struct {
		name    string
		answers []answer
		term    uint64
		voters  []string
		since   int
		want    bool
	}{
		{name: "nothing heard", term: 2, voters: voters, since: 10},
		{name: "an answer to a request sent before the check", answers: []answer{{"b", 2, 9}, {"c", 2, 5}}, term: 2, voters: voters, since: 10},
		{name: "an answer to a request sent at the check's start", answers: []answer{{"b", 2, 10}}, term: 2, voters: voters, since: 10, want: true},
		{name: "a later answer replaces an earlier one", answers: []answer{{"b", 2, 5}, {"b", 2, 12}}, term: 2, voters: voters, since: 10, want: true},
		{name: "an earlier send recorded late does not go back", answers: []answer{{"b", 2, 12}, {"b", 2, 5}}, term: 2, voters: voters, since: 10, want: true},
		{name: "answers of an older term", answers: []answer{{"b", 1, 12}, {"c", 1, 12}}, term: 2, voters: voters, since: 10},
		{name: "a newer term's answer drops the older ones", answers: []answer{{"b", 2, 12}, {"c", 3, 12}}, term: 2, voters: voters, since: 10},
		{name: "a non-voter's answer does not count", answers: []answer{{"x", 2, 12}}, term: 2, voters: voters, since: 10},
		{name: "five voters need two followers", answers: []answer{{"b", 2, 12}}, term: 2, voters: []string{"a", "b", "c", "d", "e"}, since: 10},
		{name: "five voters, two followers", answers: []answer{{"b", 2, 12}, {"e", 2, 11}}, term: 2, voters: []string{"a", "b", "c", "d", "e"}, since: 10, want: true},
		{name: "a leader outside its configuration", answers: []answer{{"b", 2, 12}, {"c", 2, 12}}, term: 2, voters: []string{"b", "c"}, since: 10},
		{name: "a single voter needs nobody", term: 2, voters: []string{"a"}, since: 10, want: true},
		{name: "term zero", term: 0, voters: []string{"a"}, since: 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var tr Tracker
			for _, a := range c.answers {
				tr.Answered(a.peer, a.term, at(a.ms))
			}
			if got := tr.HeardSince(at(c.since), c.term, "a", c.voters); got != c.want {
				t.Fatalf("HeardSince = %v, want %v", got, c.want)
			}
		})
	}
}

// An answer without a promise is heard but holds no lease; a promised one
// does both.
func TestTrackerAnsweredIsNotAPromise(t *testing.T) {
	var tr Tracker
	voters := []string{"a", "b", "c"}
	tr.Answered("b", 2, at(0))
	if tr.Held(at(1), 2, "a", voters) {
		t.Fatal("an answer without a promise holds a lease")
	}
	if !tr.HeardSince(at(0), 2, "a", voters) {
		t.Fatal("the answer is not heard")
	}
	tr.Ack("c", 2, at(1), d, d)
	if !tr.Held(at(2), 2, "a", voters) {
		t.Fatal("a promised answer holds no lease")
	}
}
