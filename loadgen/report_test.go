package loadgen

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

var update = flag.Bool("update", false, "rewrite golden files")

// sampleReport is a fixed report: every field set, so the golden file pins
// the whole JSON shape.
func sampleReport() *Report {
	began := time.Date(2026, 11, 23, 22, 0, 0, 0, time.UTC)
	iv := func(at, eps float64, errs, thr int64) Interval {
		return Interval{Type: "interval", ElapsedSeconds: at, IntervalSeconds: 1, Figures: Figures{
			EntitiesPerSec: eps, WritesPerSec: eps, OK: int64(eps), Writes: int64(eps), Errors: errs, Throttled: thr,
			P50Ms: 2.5, P99Ms: 20, ErrorsByCode: map[string]int64{"503 ServerBusy": thr},
		}}
	}
	m := &pb.PartitionMap{
		Servers: []*pb.ServerInfo{{ServerId: "ps1", Alive: true}, {ServerId: "ps2", Alive: true}, {ServerId: "ps3"}},
		Ranges: []*pb.RangeDescriptor{
			{RangeId: 1, Table: "Runs"}, {RangeId: 2, Table: "runs"}, {RangeId: 3, Table: "other"},
		},
		Leaders: map[uint64]string{1: "ps1", 2: "ps2", 3: "ps2"},
		Loads:   map[uint64]*pb.RangeLoad{1: {EntitiesPerSec: 700}, 2: {EntitiesPerSec: 650}, 3: {EntitiesPerSec: 99}},
	}
	r := &Report{
		Run: Start{Type: "start", Endpoint: "http://127.0.0.1:10002/devstoreaccount1", Table: "runs", Scenario: ScenarioUniform,
			Partitions: 1024, Workers: 64, DurationSeconds: 3, EntitySize: 1024, Seed: 7},
		Began:     began,
		Intervals: []Interval{iv(1, 1500, 10, 8), iv(2, 1400, 0, 0), iv(3, 2900, 0, 0)},
		Cluster:   []ClusterSample{clusterSampleOf(m, "runs", 2)},
		Summary: Summary{Type: "summary", Scenario: ScenarioUniform, Table: "runs", Workers: 64, DurationSeconds: 3,
			Figures: Figures{EntitiesPerSec: 1933.3, OK: 5800, Writes: 5800, Errors: 10, Throttled: 8, P50Ms: 2.5, P99Ms: 20,
				ErrorsByCode: map[string]int64{"503 ServerBusy": 8, "timeout": 2}}, P90Ms: 9, MaxMs: 40},
	}
	events := []*pb.Event{
		{Seq: 4, UnixNano: began.Add(-time.Second).UnixNano(), Kind: pb.EventKind_EVENT_KIND_SPLIT, Table: "runs"},
		{Seq: 5, UnixNano: began.Add(1500 * time.Millisecond).UnixNano(), Kind: pb.EventKind_EVENT_KIND_SPLIT, Table: "runs",
			RangeIds: []uint64{1, 2}, Servers: []string{"ps1"}, Figures: map[string]float64{"entities_per_sec": 1500},
			Message: "split range 1 at \"k0512\"", Cause: "policy", DurationSeconds: 0.05},
		{Seq: 6, UnixNano: began.Add(1600 * time.Millisecond).UnixNano(), Kind: pb.EventKind_EVENT_KIND_SPLIT, Table: "other"},
		{Seq: 7, UnixNano: began.Add(2 * time.Second).UnixNano(), Kind: pb.EventKind_EVENT_KIND_LEADER_TRANSFER, Table: "runs",
			RangeIds: []uint64{2}, Servers: []string{"ps1", "ps2"}, Message: "leader of range 2 to ps2", Cause: "policy"},
		{Seq: 8, UnixNano: began.Add(2500 * time.Millisecond).UnixNano(), Kind: pb.EventKind_EVENT_KIND_SERVER_DOWN,
			Servers: []string{"ps3"}, Message: "ps3 missed its heartbeats", Cause: "policy"},
	}
	for _, e := range events {
		if re, ok := reportEventOf(e, "runs", began); ok {
			r.Events = append(r.Events, re)
		}
	}
	return r
}

func TestReportJSONGolden(t *testing.T) {
	got, err := sampleReport().Encode("json")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "report.golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("report JSON differs from %s (go test -run TestReportJSONGolden -update to accept):\n%s", path, got)
	}
}

// TestReportHTMLSelfContained checks the page loads nothing: no URL at all,
// no external script, style, image or frame, and the data is inline.
func TestReportHTMLSelfContained(t *testing.T) {
	b, err := sampleReport().Encode("html")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)https?:`), regexp.MustCompile(`(?i)<(script|img|iframe|link)[^>]+(src|href)=`),
		regexp.MustCompile(`(?i)@import|url\(`), regexp.MustCompile(`(?i)\bfetch\(|XMLHttpRequest`),
	} {
		// The run's endpoint is data, not something the page loads; the
		// sample's is http, so leave it out of the URL check.
		if loc := bad.FindStringIndex(strings.ReplaceAll(page, sampleReport().Run.Endpoint, "")); loc != nil {
			t.Errorf("page is not self-contained: %q at %d", page[max(0, loc[0]-40):min(len(page), loc[1]+40)], loc[0])
		}
	}
	for _, want := range []string{"webchart.lineChart", `"kind":"leader-transfer"`, `"server_entities_per_sec"`, "<svg></svg>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

func TestReportFormat(t *testing.T) {
	for path, want := range map[string]string{"r.json": "json", "out/R.HTML": "html", "r.htm": "html", "r.txt": "", "r": ""} {
		got, err := reportFormat(path)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("reportFormat(%q) = %q, %v", path, got, err)
		}
	}
}

// TestReportEmptyListsAreLists: a run without events or cluster samples
// has [] in its JSON, not null, so readers need no special case.
func TestReportEmptyListsAreLists(t *testing.T) {
	w := newClusterWatch(nil, "t", time.Now())
	samples, events, err := w.result()
	if samples == nil || events == nil || err != nil {
		t.Fatalf("result() = %v, %v, %v", samples, events, err)
	}
}
