package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

func msec(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestOutage(t *testing.T) {
	times := [][]time.Duration{
		{msec(100), msec(900), msec(2500), msec(2600)}, // gap 900 -> 2500
		{msec(800), msec(1800)},                        // gap 800 -> 1800, the first after the event
		{msec(950)},                                    // not written again
		{msec(1200), msec(1300)},                       // nothing before the event: not counted
		{msec(500), msec(4000)},                        // written again only after until
	}
	all := func(int) bool { return true }
	g := outage(msec(1000), msec(3000), times, all)
	if g.any != msec(200) {
		t.Errorf("any = %v, want 200ms (table 3's at 1200, though it counts for no gap)", g.any)
	}
	if want := []time.Duration{msec(1000), msec(1600)}; fmt.Sprint(g.gaps) != fmt.Sprint(want) {
		t.Errorf("gaps = %v, want %v", g.gaps, want)
	}
	if g.unwritten != 2 {
		t.Errorf("unwritten = %d, want 2 (tables 2 and 4)", g.unwritten)
	}
	only := outage(msec(1000), msec(3000), times, func(k int) bool { return k == 1 })
	if fmt.Sprint(only.gaps) != fmt.Sprint([]time.Duration{msec(1000)}) || only.unwritten != 0 || only.any != msec(200) {
		t.Errorf("table 1 alone: %+v", only)
	}
	none := outage(msec(5000), msec(6000), times, all)
	if none.any != -1 || len(none.gaps) != 0 || none.unwritten != 5 {
		t.Errorf("after every success: %+v", none)
	}
	if s := none.String(); s != "no insert succeeded after it; 5 tables not written again" {
		t.Errorf("String() = %q", s)
	}
}

func TestRecovery(t *testing.T) {
	// Ten per bucket, a kill at bucket 5, nothing for 3 buckets, then 6 a
	// bucket for 10, then 10 again.
	var series []int
	for i := 0; i < 5; i++ {
		series = append(series, 10)
	}
	series = append(series, 0, 0, 0)
	for i := 0; i < 10; i++ {
		series = append(series, 6)
	}
	for i := 0; i < 20; i++ {
		series = append(series, 10)
	}
	cases := []struct {
		frac float64
		want int
	}{
		{0.5, 2},  // from bucket 7: 0 and nine 6s, mean 5.4
		{0.9, 11}, // from bucket 16: two 6s and eight 10s, mean 9.2 (bucket 15's 8.8)
		{1.5, -1},
	}
	for _, c := range cases {
		if got := recovery(series, 5, 10, 10, c.frac); got != c.want {
			t.Errorf("recovery to %.0f %% = %d buckets after the kill, want %d", c.frac*100, got, c.want)
		}
	}
}

func TestErrorKind(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&azcore.ResponseError{StatusCode: http.StatusServiceUnavailable, ErrorCode: "ServerBusy"}, "503 ServerBusy"},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), "timed out"},
		{errors.New(`Post "http://x": dial tcp 127.0.0.1:1: connect: connection refused`), "no answer: connection refused"},
	}
	for _, c := range cases {
		if got := errorKind(c.err); got != c.want {
			t.Errorf("errorKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestLargestGroupLeader(t *testing.T) {
	rs := []rangeInfo{
		{RangeID: 1, Leader: "ps3"},
		{RangeID: 5, Group: 2, Leader: "ps1"},
		{RangeID: 6, Group: 2, Leader: "ps1"},
		{RangeID: 7, Group: 9, Leader: "ps2"},
	}
	if got := largestGroupLeader(rs); got != "ps1" {
		t.Errorf("largestGroupLeader = %q, want ps1 (group 2 holds two)", got)
	}
	if got := largestGroupLeader(nil); got != "" {
		t.Errorf("largestGroupLeader(nil) = %q", got)
	}
	led := ledBy([]rangeInfo{{Table: "am1", Leader: "ps1"}, {Table: "am2", Leader: "ps2"}, {Table: "b", Leader: "ps1"}}, "am", "ps1")
	if len(led) != 1 || !led["am1"] {
		t.Errorf("ledBy = %v, want am1 only", led)
	}
}

func TestErrorsLine(t *testing.T) {
	if got := errorsLine(nil); got != "none" {
		t.Errorf("errorsLine(nil) = %q", got)
	}
	got := errorsLine(map[string]int{"timed out": 2, "503 ServerBusy": 5})
	if want := "7 (5 503 ServerBusy, 2 timed out)"; got != want {
		t.Errorf("errorsLine = %q, want %q", got, want)
	}
}

func TestTimeline(t *testing.T) {
	series := []int{1, 2, 3, 4, 5, 6, 7}
	got := timeline(series, 2, 1, map[int]string{3: "kill", 6: "restart"})
	if want := "5 [kill] 9 [restart] 13"; got != want {
		t.Errorf("timeline = %q, want %q", got, want)
	}
}
