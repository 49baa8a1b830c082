package lifecycle

import (
	"testing"
	"time"
)

// TestOpenFailuresRecord is the broken-replica rule: damage breaks at
// once; a plain failure never, however often and long repeated (a
// server-wide fault must not break every replica); a transient one never
// and is not counted.
func TestOpenFailuresRecord(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type rec struct {
		kind FailureKind
		at   time.Duration // after t0
	}
	var persistent []rec
	for i := 0; i < 100; i++ {
		persistent = append(persistent, rec{Failure, time.Duration(i) * 10 * time.Second})
	}
	cases := []struct {
		name   string
		recs   []rec
		broken bool
		count  int
	}{
		{"one damage", []rec{{Damage, 0}}, true, 1},
		{"one failure", []rec{{Failure, 0}}, false, 1},
		{"transients only", []rec{{Transient, 0}, {Transient, time.Minute}, {Transient, 2 * time.Minute}, {Transient, 3 * time.Minute}, {Transient, 4 * time.Minute}}, false, 0},
		{"failures fast, short span", []rec{{Failure, 0}, {Failure, time.Second}, {Failure, 2 * time.Second}, {Failure, 3 * time.Second}, {Failure, 4 * time.Second}, {Failure, 5 * time.Second}}, false, 6},
		{"five failures over 30 s", []rec{{Failure, 0}, {Failure, time.Second}, {Failure, 2 * time.Second}, {Failure, 3 * time.Second}, {Failure, 30 * time.Second}}, false, 5},
		{"failures for over 16 minutes", persistent, false, 100},
		{"transients between failures not counted", []rec{{Failure, 0}, {Transient, time.Second}, {Failure, 2 * time.Second}, {Transient, 3 * time.Second}, {Failure, 4 * time.Second}, {Failure, 5 * time.Second}, {Transient, time.Minute}}, false, 4},
		{"damage after failures", []rec{{Failure, 0}, {Failure, time.Minute}, {Damage, 2 * time.Minute}}, true, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f OpenFailures
			var broken bool
			for _, r := range c.recs {
				f, broken = f.Record(r.kind, t0.Add(r.at))
			}
			if broken != c.broken || f.Count != c.count {
				t.Fatalf("after %d records: broken %v, count %d; want %v, %d", len(c.recs), broken, f.Count, c.broken, c.count)
			}
			if f.Count > 0 && !f.First.Equal(t0) {
				t.Fatalf("first failure at %v, want %v", f.First, t0)
			}
		})
	}
}
