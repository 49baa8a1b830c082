package master

import (
	"errors"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

func TestTransferable(t *testing.T) {
	t0 := time.Unix(1000, 0)
	report := func(p *progress, server string, applied uint64, at time.Time) {
		p.observe(server, []*pb.RangeStatus{{RangeId: 7, AppliedIndex: applied}}, nil, true, at)
	}
	cases := []struct {
		name  string
		setup func(p *progress)
		ok    bool
	}{
		{"caught up and live", func(p *progress) {
			report(p, "a", 5000, t0)
			report(p, "b", 4990, t0)
		}, true},
		{"never reported", func(p *progress) { report(p, "a", 5000, t0) }, false},
		{"silent (down or paused)", func(p *progress) {
			report(p, "a", 5000, t0)
			report(p, "b", 5000, t0.Add(-10*time.Second))
		}, false},
		{"lagging", func(p *progress) {
			report(p, "a", 50000, t0)
			report(p, "b", 100, t0)
		}, false},
		{"unchanged since a full report, still heartbeating", func(p *progress) {
			report(p, "a", 5000, t0)
			report(p, "b", 5000, t0.Add(-10*time.Second))
			p.observe("b", nil, nil, false, t0)
		}, true},
		{"removed in a delta", func(p *progress) {
			report(p, "a", 5000, t0)
			report(p, "b", 5000, t0.Add(-time.Second))
			p.observe("b", nil, []uint64{7}, false, t0)
		}, false},
		{"left out of a later full report", func(p *progress) {
			report(p, "a", 5000, t0)
			report(p, "b", 5000, t0.Add(-10*time.Second))
			p.observe("b", []*pb.RangeStatus{{RangeId: 8}}, nil, true, t0)
		}, false},
		{"lagging only behind a stale report", func(p *progress) {
			report(p, "a", 50000, t0.Add(-10*time.Second))
			report(p, "c", 120, t0)
			report(p, "b", 100, t0)
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newProgress()
			c.setup(p)
			err := p.transferable(7, "b", t0, 3*time.Second)
			if (err == nil) != c.ok {
				t.Fatalf("transferable = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrBadTarget) {
				t.Fatalf("error %v is not ErrBadTarget", err)
			}
		})
	}
}
