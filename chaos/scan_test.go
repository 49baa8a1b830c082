package chaos

import (
	"encoding/base64"
	"fmt"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// scripted builds a completed scan from pages of "pk/rk=value" entries
// ("=value" optional: noValue); each page but the last continues at the
// next page's first key, as the front-end's tokens would. Every page is
// asked after all of the test's confirmations (see askedAfter).
func scripted(bounds pkBounds, pages ...[]string) *scanRec {
	s := &scanRec{id: 7, bounds: bounds, top: 2, started: 1500 * time.Millisecond}
	for p, page := range pages {
		pg := scanPage{first: len(s.ents), n: len(page), from: time.Duration(p) * time.Second, to: time.Duration(p)*time.Second + time.Millisecond,
			confirmedAt: math.MaxInt}
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

// askedAfter sets how many confirmations preceded each page.
func askedAfter(s *scanRec, confirmedAt ...int) *scanRec {
	for p := range s.pages {
		s.pages[p].confirmedAt = confirmedAt[min(p, len(confirmedAt)-1)]
	}
	return s
}

// onSecondary marks s as a scan of the secondary.
func onSecondary(s *scanRec) *scanRec {
	s.secondary, s.synced, s.hasSync = true, 9*time.Second, true
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
	required := []confirmation{{key: "cnt0/c", how: "created by setup", acked: true}, {key: "p00/a", how: "acknowledged t+0.5s", acked: true},
		{key: "p01/a", how: "acknowledged t+0.7s", acked: true}, {key: "p02/a", how: "returned by scan 3"}, {key: "p03/a", how: "acknowledged t+1.0s", acked: true}}
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
			[]string{"missing p01/a"}, `acknowledged t+0.7s, before page 1 was asked, not returned; between p00/b and p02/a of page 1 (t+1.000-1.001s) asked at "1!4!cDAw"/"1!4!Yg--" (p00/b)`},
		{"missing at a page boundary", scripted(pkBounds{}, []string{"cnt0/c", "p00/a", "p00/b"}, []string{"p02/a", "p03/a"}),
			[]string{"missing p01/a"}, `after p00/b of page 0 (t+0.000-0.001s) asked at the start returned 3 [cnt0/c .. p00/b] next "1!4!cDAy"/"1!4!YQ--" (p02/a); before p02/a of page 1`},
		// p01/a (required[2]) lies in page 1's span [p00/b, end): confirmed
		// after page 0 was asked, before page 1 was.
		{"missing, confirmed during the scan", askedAfter(scripted(pkBounds{}, []string{"cnt0/c", "p00/a"}, []string{"p00/b", "p02/a", "p03/a"}), 2, 5),
			[]string{"missing p01/a"}, "acknowledged t+0.7s, before page 1 was asked, not returned; between p00/b and p02/a of page 1"},
		// p01/a lies in page 0's span [start, p03/a), confirmed after it was asked.
		{"clean, confirmed after the page of its span was asked", askedAfter(scripted(pkBounds{}, []string{"cnt0/c", "p00/a", "p00/b", "p02/a"}, []string{"p03/a"}), 2, 5),
			nil, ""},
		// p01/a and p02/a lie in page 1's span [p00/b, end), confirmed after it was asked.
		{"clean, confirmed after the last page was asked", askedAfter(scripted(pkBounds{}, []string{"cnt0/c", "p00/a"}, []string{"p00/b", "p03/a"}), 2, 2),
			nil, ""},
		{"missing in the filter", scripted(p0203, []string{"p02/b=5"}), []string{"missing p02/a"}, "returned by scan 3, before page 0 was asked, not returned; before p02/b"},
		// The secondary is held to acknowledged writes only.
		{"secondary: missing", onSecondary(scripted(pkBounds{}, []string{"cnt0/c", "p00/a"}, []string{"p00/b", "p03/a"})),
			[]string{"missing p01/a"}, "secondary, LastSyncTime t+9.000s"},
		{"secondary: clean, a key a primary scan returned absent", onSecondary(scripted(pkBounds{}, []string{"cnt0/c", "p00/a", "p01/a"}, []string{"p03/a"})),
			nil, ""},
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
	askedAfter(first, len(w.confirmed))
	w.mu.Lock()
	w.acknowledgedLocked("p00/b") // after the first scan began
	w.mu.Unlock()
	w.endScan(first, nil)
	if w.scans.done != 1 || len(w.scans.violations) != 0 {
		t.Fatalf("first scan: %d done, violations %v", w.scans.done, w.scans.violations)
	}
	second := scripted(pkBounds{}, []string{"p00/a"})
	askedAfter(second, len(w.confirmed))
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
	// A page the service refused with a client error is its fault (the
	// table is never deleted): a violation, not only a failed scan.
	before := len(w.scans.violations)
	for _, status := range []int{503, 429, 408, 400, 404} {
		resp := &http.Response{StatusCode: status, Request: httptest.NewRequest(http.MethodGet, "/chaos()", nil)}
		w.endScan(scripted(pkBounds{}), &azcore.ResponseError{StatusCode: status, RawResponse: resp})
	}
	var refused []string
	for _, v := range w.scans.violations[before:] {
		refused = append(refused, v.kind)
	}
	if strings.Join(refused, "; ") != "refused page; refused page" {
		t.Errorf("pages refused 503, 429, 408, 400, 404: violations %q, want the 400 and the 404", refused)
	}
}

// TestRunScan follows a scripted two-page answer through the SDK's pager:
// the pages, their tokens and entities are recorded, and a key
// acknowledged while page 0 was served, in page 1's span, is required of
// page 1 (each page notes the confirmations made before it was asked).
func TestRunScan(t *testing.T) {
	w := &workload{start: time.Now(), stop: make(chan struct{}), attempted: map[string]int64{}, isConfirmed: map[string]bool{}}
	w.attemptKeys([]string{"p00/a", "p01/a"}, []int64{1, 2})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
		if r.URL.Query().Get("NextPartitionKey") == "" {
			w.mu.Lock()
			w.acknowledgedLocked("p01/a") // p01/a is written while page 0 is served
			w.mu.Unlock()
			rw.Header().Set("x-ms-continuation-NextPartitionKey", encodeTok("p01"))
			rw.Header().Set("x-ms-continuation-NextRowKey", encodeTok(""))
			fmt.Fprint(rw, `{"value":[{"PartitionKey":"p00","RowKey":"a","V":"1","V@odata.type":"Edm.Int64"}]}`)
			return
		}
		fmt.Fprint(rw, `{"value":[]}`) // p01/a missing
	}))
	defer srv.Close()
	tc, err := aztables.NewClientWithNoCredential(srv.URL+"/chaos", &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	w.tc = tc
	s := &scanRec{id: 1, top: 50}
	if err := w.runScan(s); err != nil {
		t.Fatal(err)
	}
	if len(s.pages) != 2 || len(s.ents) != 1 || s.ents[0].value != 1 || decodeTok(s.pages[1].askedPK) != "p01" || s.pages[1].confirmedAt != 1 {
		t.Fatalf("pages %+v, entities %+v", s.pages, s.ents)
	}
	w.endScan(s, nil)
	if len(w.scans.violations) != 1 || w.scans.violations[0].key != "p01/a" || !strings.Contains(w.scans.violations[0].detail, "before page 1 was asked") || w.scans.required != 1 {
		t.Fatalf("violations %v, want p01/a missing from page 1", w.scans.violations)
	}
}

// TestSecondaryScan reads the secondary's LastSyncTime through the SDK
// before a scan of it: keys acknowledged at or before it are required,
// keys acknowledged after it, or only returned by a primary scan, are not.
func TestSecondaryScan(t *testing.T) {
	synced := time.Now().Add(-time.Minute).Truncate(time.Second)
	w := &workload{start: synced.Add(-10 * time.Second), stop: make(chan struct{}), attempted: map[string]int64{}, isConfirmed: map[string]bool{}}
	w.attemptKeys([]string{"p00/a", "p01/a", "p02/a", "p03/a", "p04/a"}, []int64{1, 2, 3, 4, 5})
	w.confirmed = []confirmation{
		{key: "p00/a", how: "acknowledged", acked: true, at: synced.Add(-2 * time.Second)},
		{key: "p01/a", how: "returned by scan 1", at: synced.Add(-time.Second)},
		{key: "p02/a", how: "acknowledged", acked: true, at: synced},
		{key: "p03/a", how: "acknowledged", acked: true, at: synced.Add(time.Millisecond)},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("comp") == "stats" {
			rw.Header().Set("Content-Type", "application/xml")
			fmt.Fprintf(rw, `<?xml version="1.0" encoding="utf-8"?><StorageServiceStats><GeoReplication><Status>live</Status><LastSyncTime>%s</LastSyncTime></GeoReplication></StorageServiceStats>`,
				synced.UTC().Format(http.TimeFormat))
			return
		}
		if !strings.Contains(r.URL.Path, "-secondary/") {
			t.Errorf("scan of %s, want the secondary", r.URL.Path)
		}
		rw.Header().Set("Content-Type", "application/json;odata=minimalmetadata")
		fmt.Fprint(rw, `{"value":[{"PartitionKey":"p04","RowKey":"a"}]}`) // not a primary scan: confirms nothing
	}))
	defer srv.Close()
	opts := &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}}
	sec, err := aztables.NewServiceClientWithNoCredential(srv.URL+"/devstoreaccount1-secondary", opts)
	if err != nil {
		t.Fatal(err)
	}
	w.sec = sec
	s := &scanRec{id: 1, top: 50, secondary: true, worker: 2}
	if err := w.runScan(s); err != nil {
		t.Fatal(err)
	}
	w.endScan(s, nil)
	var got []string
	for _, v := range w.scans.violations {
		got = append(got, v.kind+" "+v.key)
	}
	if strings.Join(got, "; ") != "missing p00/a; missing p02/a" || w.scans.secondary != 1 || s.synced != 10*time.Second || w.scans.required != 2 {
		t.Fatalf("violations %q, %d secondary scans, synced t+%v; want p00/a and p02/a missing, LastSyncTime t+10s", got, w.scans.secondary, s.synced)
	}
	if len(w.confirmed) != 4 {
		t.Errorf("a secondary scan confirmed keys: %v", w.confirmed)
	}
}

// TestNewScan: scanner 0 scans the primary at once, scanner 1 pauses
// between pages, scanner 2 scans the secondary; $top stays in 50..200.
func TestNewScan(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 100; i++ {
		for worker := 0; worker < 3; worker++ {
			s := newScan(rng, worker)
			if s.secondary != (worker == 2) || (s.pause > 0) != (worker == 1) || s.top < 50 || s.top > 200 {
				t.Fatalf("scanner %d: %+v", worker, s)
			}
		}
	}
}

// TestAcknowledgedAfterScanned: a key a completed primary scan returned
// before its write was acknowledged is held to the secondary once the
// acknowledgement comes (the secondary is held to acknowledged writes
// only, and the first confirmation dropped the acknowledgement), and the
// primary still reports it missing once, not twice.
func TestAcknowledgedAfterScanned(t *testing.T) {
	w := &workload{start: time.Now(), attempted: map[string]int64{}, isConfirmed: map[string]bool{}}
	w.attemptKeys([]string{"p00/a", "p01/a"}, []int64{1, 2})
	w.mu.Lock()
	w.acknowledgedLocked("p00/a")
	w.confirmLocked("p01/a", "returned by scan 1", false)
	w.acknowledgedLocked("p01/a")
	w.acknowledgedLocked("p01/a") // a second acknowledgement adds nothing
	w.mu.Unlock()
	if len(w.confirmed) != 3 || !w.confirmed[2].acked || !w.confirmed[2].again {
		t.Fatalf("confirmations %+v; want p00/a, p01/a by the scan, p01/a acknowledged again", w.confirmed)
	}
	for _, s := range []*scanRec{scripted(pkBounds{}, []string{"p00/a"}), onSecondary(scripted(pkBounds{}, []string{"p00/a"}))} {
		var got []string
		for _, v := range checkScan(s, w.confirmed, w.attempted) {
			got = append(got, v.kind+" "+v.key)
		}
		if strings.Join(got, "; ") != "missing p01/a" {
			t.Errorf("secondary %v: violations %q, want p01/a missing once", s.secondary, got)
		}
	}
}
