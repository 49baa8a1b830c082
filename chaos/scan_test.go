package chaos

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"
)

// scripted builds a completed scan from pages of "pk/rk=value" entries
// ("=value" optional: noValue); each page but the last continues at the
// next page's first key, as the front-end's tokens would.
func scripted(bounds pkBounds, pages ...[]string) *scanRec {
	s := &scanRec{id: 7, bounds: bounds, top: 2, started: 1500 * time.Millisecond}
	for p, page := range pages {
		pg := scanPage{first: len(s.ents), n: len(page), from: time.Duration(p) * time.Second, to: time.Duration(p)*time.Second + time.Millisecond}
		for _, ent := range page {
			k, val, hasVal := strings.Cut(ent, "=")
			pk, rk := splitKey(k)
			v := int64(noValue)
			if hasVal {
				fmt.Sscan(val, &v)
			}
			s.ents = append(s.ents, scanEntity{pk: pk, rk: rk, value: v, page: p})
		}
		if p > 0 {
			pg.askedPK, pg.askedRK = s.pages[p-1].nextPK, s.pages[p-1].nextRK
		}
		if p+1 < len(pages) && len(pages[p+1]) > 0 {
			pk, rk := splitKey(strings.SplitN(pages[p+1][0], "=", 2)[0])
			pg.hasNext, pg.nextPK, pg.nextRK = true, encodeTok(pk), encodeTok(rk)
		}
		s.pages = append(s.pages, pg)
	}
	return s
}

// encodeTok is the front-end's token shape (frontend/continuation.go).
func encodeTok(k string) string {
	b := base64.StdEncoding.EncodeToString([]byte(k))
	return fmt.Sprintf("1!%d!%s", len(b), strings.ReplaceAll(b, "=", "-"))
}

// TestCheckScan scripts scans with each kind of violation and clean ones
// (entities of unknown outcome present or absent, required keys outside
// the filter absent, values not carried by a $select).
func TestCheckScan(t *testing.T) {
	attempted := map[string]int64{
		"cnt0/c": noValue, "p00/a": 1, "p00/b": 2, "p01/a": 3, "p02/a": 4, "p02/b": 5, "p03/a": 6, "reg0/r": noValue,
	}
	required := []confirmation{{"cnt0/c", "created by setup"}, {"p00/a", "acknowledged t+0.5s"}, {"p01/a", "acknowledged t+0.7s"},
		{"p02/a", "returned by scan 3"}, {"p03/a", "acknowledged t+1.0s"}}
	p0203 := pkBounds{lower: "p02", upper: "p03", hasLower: true, hasUpper: true, lowerIncl: true, upperIncl: false}
	tests := []struct {
		name   string
		scan   *scanRec
		want   []string // kind and key of each violation, in order
		detail string   // in the first violation's detail
	}{
		{"clean", scripted(pkBounds{}, []string{"cnt0/c=41", "p00/a=1"}, []string{"p00/b=2", "p01/a=3"}, []string{"p02/a=4", "p03/a", "reg0/r=9"}), nil, ""},
		{"clean, filtered, an unknown outcome absent", scripted(p0203, []string{"p02/a=4"}, nil), nil, ""},
		{"missing within a page", scripted(pkBounds{}, []string{"cnt0/c", "p00/a"}, []string{"p00/b", "p02/a"}, []string{"p03/a"}),
			[]string{"missing p01/a"}, `acknowledged t+0.7s, not returned; between p00/b and p02/a of page 1 (t+1.000-1.001s) asked at "1!4!cDAw"/"1!4!Yg--" (p00/b)`},
		{"missing at a page boundary", scripted(pkBounds{}, []string{"cnt0/c", "p00/a", "p00/b"}, []string{"p02/a", "p03/a"}),
			[]string{"missing p01/a"}, `after p00/b of page 0 (t+0.000-0.001s) asked at the start returned 3 [cnt0/c .. p00/b] next "1!4!cDAy"/"1!4!YQ--" (p02/a); before p02/a of page 1`},
		{"missing in the filter", scripted(p0203, []string{"p02/b=5"}), []string{"missing p02/a"}, "returned by scan 3, not returned; before p02/b"},
		{"duplicate across pages", scripted(pkBounds{}, []string{"cnt0/c", "p00/a", "p01/a"}, []string{"p01/a", "p02/a", "p03/a"}),
			[]string{"duplicate p01/a"}, "entity 2 and 3: page 0"},
		{"out of order", scripted(pkBounds{}, []string{"cnt0/c", "p00/a", "p02/a"}, []string{"p01/a", "p03/a"}),
			[]string{"out of order p01/a"}, "entity 3 after p02/a"},
		{"unknown", scripted(pkBounds{}, []string{"cnt0/c", "p00/a", "p01/a"}, []string{"p02/a", "p02/zz", "p03/a"}),
			[]string{"unknown p02/zz"}, "no write was sent for it; page 1"},
		{"outside the filter", scripted(p0203, []string{"p02/a", "p03/a"}), []string{"outside filter p03/a"}, "page 0"},
		{"wrong value", scripted(p0203, []string{"p02/a=5"}), []string{"wrong value p02/a"}, "V=5, written 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vs := checkScan(tc.scan, required, attempted)
			var got []string
			for _, v := range vs {
				got = append(got, v.kind+" "+v.key)
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
			if len(vs) > 0 && (!strings.Contains(vs[0].detail, tc.detail) || !strings.HasPrefix(vs[0].detail, "scan 7 (")) {
				t.Errorf("detail %q, want it to name the scan and hold %q", vs[0].detail, tc.detail)
			}
		})
	}
}

// TestScanRequires checks the bookkeeping around checkScan: a key
// acknowledged after a scan began is not required of it, one acknowledged
// before is, and a key of unknown outcome that a completed scan returned
// is required of every scan that begins later (each key once).
func TestScanRequires(t *testing.T) {
	w := &workload{start: time.Now(), attempted: map[string]int64{}, isConfirmed: map[string]bool{}}
	w.attemptKeys([]string{"p00/a", "p00/b", "p01/a"}, []int64{1, 2, 3})
	w.mu.Lock()
	w.acknowledgedLocked("p00/a")
	w.mu.Unlock()
	// p00/b: being written; p01/a: outcome unknown yet.
	first := scripted(pkBounds{}, []string{"p00/a", "p00/b", "p01/a"})
	first.confirmedAt = len(w.confirmed)
	w.mu.Lock()
	w.acknowledgedLocked("p00/b") // after the first scan began
	w.mu.Unlock()
	w.endScan(first, nil)
	if w.scans.done != 1 || len(w.scans.violations) != 0 {
		t.Fatalf("first scan: %d done, violations %v", w.scans.done, w.scans.violations)
	}
	second := scripted(pkBounds{}, []string{"p00/a"})
	second.confirmedAt = len(w.confirmed)
	w.endScan(second, nil)
	var got []string
	for _, v := range w.scans.violations {
		got = append(got, v.kind+" "+v.key)
	}
	if strings.Join(got, "; ") != "missing p00/b; missing p01/a" {
		t.Fatalf("second scan: violations %q, want p00/b and p01/a missing", got)
	}
	if !strings.Contains(w.scans.violations[1].detail, "returned by scan 7") {
		t.Errorf("detail %q does not say which scan returned p01/a", w.scans.violations[1].detail)
	}
	w.endScan(scripted(pkBounds{}), fmt.Errorf("page 3: 503"))
	if w.scans.failed != 1 || w.scans.done != 2 || len(w.scans.errors) != 1 {
		t.Errorf("a failed scan: %+v, want counted as failed, not checked", w.scans)
	}
}
