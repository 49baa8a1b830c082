package master

import (
	"slices"
	"testing"
)

// TestFreezeForgottenOnlyOnProof scripts accounts of range 2's freeze
// (heartbeat reports, a leader's answer to FreezeRange only_if_frozen or
// to UnfreezeRange) and checks the freeze the master counts after each:
// it forgets a freeze only when a replica that applied past it is not
// frozen, and follows a freeze at another index explicitly. Accounts
// carry the range's descriptor generation (0: not given); a higher one
// may name another log (a detach, an attach), whose indexes do not
// compare with the old one's.
func TestFreezeForgottenOnlyOnProof(t *testing.T) {
	type account struct {
		gen            uint64
		frozen         bool
		index, applied uint64
		want           uint64 // the freeze counted after it (0: none)
	}
	frozen := func(index, applied, want uint64) account { return account{0, true, index, applied, want} }
	thawed := func(applied, want uint64) account { return account{0, false, 0, applied, want} }
	at := func(gen uint64, a account) account { a.gen = gen; return a }
	tests := []struct {
		name     string
		accounts []account
	}{
		{"an unfreeze applied past the freeze", []account{frozen(10, 10, 10), thawed(11, 0)}},
		{"a leader elected before applying the freeze", []account{frozen(10, 10, 10), thawed(9, 10), thawed(10, 0)}},
		{"a lagging follower's report", []account{frozen(10, 12, 10), thawed(7, 10), frozen(10, 10, 10)}},
		{"frozen again at a later index", []account{frozen(10, 10, 10), frozen(15, 15, 15), thawed(12, 15), thawed(15, 0)}},
		{"an unfreeze answered frozen at a later freeze", []account{frozen(10, 10, 10), thawed(10, 0), frozen(15, 16, 15)}},
		{"a stale report of an undone freeze", []account{frozen(10, 10, 10), thawed(12, 0), frozen(10, 11, 0)}},
		{"a report of an older freeze than the counted one", []account{frozen(15, 15, 15), frozen(10, 10, 15)}},
		{"an older build reports no index", []account{frozen(0, 20, 1), thawed(1, 0)}},
		{"never frozen", []account{thawed(5, 0)}},
		// A span of a shared group (generation 4, the group's log at
		// 9,000) detached into a group of its own (generation 5, a new
		// log): a freeze there, at 30, is news; a replica that has not
		// applied the detach yet proves nothing either way.
		{"a freeze in the log a detach started", []account{at(4, thawed(9000, 0)), at(5, thawed(20, 0)), at(5, frozen(30, 30, 30)), at(4, thawed(9001, 30)), at(5, thawed(31, 0))}},
		{"the detach's first account is the freeze", []account{at(4, thawed(9000, 0)), at(5, frozen(30, 30, 30))}},
		{"a lagging replica of the old log after the detach", []account{at(5, thawed(20, 0)), at(4, frozen(8000, 9000, 0)), at(5, frozen(30, 30, 30)), at(4, thawed(9000, 30))}},
		{"an answer without a generation is of the latest", []account{at(5, frozen(30, 30, 30)), thawed(31, 0)}},
		// Within one log a higher generation (a membership change) keeps
		// the counted freeze and what proves it undone.
		{"a higher generation keeps the counted freeze", []account{at(3, frozen(10, 10, 10)), at(4, thawed(9, 10)), at(4, thawed(11, 0))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReports()
			for i, a := range tt.accounts {
				still := r.observeFreeze(2, a.gen, a.frozen, a.index, a.applied)
				if got := r.frozenAt(2); got != a.want || still != (a.want != 0) {
					t.Fatalf("account %d %+v: counted frozen at %d (still=%v), want %d", i, a, got, still, a.want)
				}
				if ids := r.frozenRanges(); slices.Contains(ids, 2) != (a.want != 0) {
					t.Fatalf("account %d: frozenRanges = %v", i, ids)
				}
			}
			r.forget(2)
			if r.frozenAt(2) != 0 || len(r.frozenRanges()) != 0 || len(r.freezeGen) != 0 {
				t.Fatal("a forgotten range is still counted frozen")
			}
		})
	}
}

// TestCanAbort: the abort is refused for a range with a server that said
// in its heartbeat that it does not apply unfreezes, or with fewer than a
// majority of servers known to apply them; one not heard from since this
// master took the lead (dead since the freeze, across a master failover)
// does not hold the range frozen.
func TestCanAbort(t *testing.T) {
	r := newReports()
	r.setMergeAbort("a", true)
	r.setMergeAbort("b", true)
	r.setMergeAbort("c", false)
	for _, tc := range []struct {
		servers []string
		want    bool
	}{
		{[]string{"a", "b"}, true},
		{[]string{"a", "b", "c"}, false},
		{[]string{"a", "b", "d"}, true},  // d never heard from (dead since the freeze, a master failover)
		{[]string{"a", "d", "e"}, false}, // a minority known: the range may be led by an older build
		{[]string{"d", "c"}, false},      // c said it does not apply unfreezes
	} {
		if got := r.canAbort(tc.servers); got != tc.want {
			t.Errorf("canAbort(%v) = %v, want %v", tc.servers, got, tc.want)
		}
	}
}
