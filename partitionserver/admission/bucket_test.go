package admission

import (
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type step struct {
		at   time.Time
		n    int
		want Decision
	}
	tests := []struct {
		name  string
		rate  float64
		burst float64
		wait  time.Duration
		steps []step
	}{
		{"burst then queue then refuse", 1000, 10, 5 * time.Millisecond, []step{
			{t0, 10, Decision{Admit: true}},
			{t0, 3, Decision{Admit: true, Wait: 3 * time.Millisecond}},
			{t0, 2, Decision{Admit: true, Wait: 5 * time.Millisecond}},
			{t0, 1, Decision{RetryAfter: 10 * time.Millisecond}},
			// 20 ms later the queue (-5) refilled to the burst.
			{ms(20), 10, Decision{Admit: true}},
		}},
		{"refill is capped at burst", 100, 5, 0, []step{
			{ms(10000), 5, Decision{Admit: true}},
			{ms(10000), 1, Decision{RetryAfter: 10 * time.Millisecond}},
			{ms(10010), 1, Decision{Admit: true}},
		}},
		{"retry after grows with the queue", 100, 1, 100 * time.Millisecond, []step{
			{t0, 1, Decision{Admit: true}},
			{t0, 10, Decision{Admit: true, Wait: 100 * time.Millisecond}},
			{t0, 10, Decision{RetryAfter: 100 * time.Millisecond}},
		}},
		{"time going back changes nothing", 1000, 1, 0, []step{
			{ms(5), 1, Decision{Admit: true}},
			{t0, 1, Decision{RetryAfter: 10 * time.Millisecond}},
		}},
		{"a request larger than the burst queues", 1000, 10, 100 * time.Millisecond, []step{
			{t0, 100, Decision{Admit: true, Wait: 90 * time.Millisecond}},
		}},
		// A change set of 100 entities on a server whose bucket and queue
		// hold fewer (capacity under 667 entities/s at the default burst
		// and queue) was refused for good, every retry too.
		{"a request larger than the burst and queue goes when the bucket is full", 1000, 10, 5 * time.Millisecond, []step{
			{t0, 1, Decision{Admit: true}},
			{t0, 100, Decision{RetryAfter: 10 * time.Millisecond}}, // full again in 1 ms
			{ms(1), 100, Decision{Admit: true}},
			// It took its 100 tokens: later requests wait for them.
			{ms(1), 1, Decision{RetryAfter: 86 * time.Millisecond}},
			{ms(200), 100, Decision{Admit: true}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.rate, tc.burst, tc.wait, t0)
			for i, s := range tc.steps {
				if got := b.Take(s.n, s.at); got != s.want {
					t.Fatalf("step %d: Take(%d) = %+v, want %+v", i, s.n, got, s.want)
				}
			}
		})
	}
}

func TestOffAdmitsEverything(t *testing.T) {
	b := New(0, 10, time.Second, time.Now())
	if d := b.Take(1<<30, time.Now()); !d.Admit || d.Wait != 0 {
		t.Fatalf("disabled bucket: %+v", d)
	}
}

// TestSustainedRate checks the long-run admitted rate equals the capacity
// when offered twice as much.
func TestSustainedRate(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := New(1500, 150, 50*time.Millisecond, t0)
	admitted := 0
	for i := range 30000 { // 3000 requests/s for 10 s
		if b.Take(1, t0.Add(time.Duration(i)*time.Second/3000)).Admit {
			admitted++
		}
	}
	if rate := float64(admitted) / 10; rate < 1450 || rate > 1600 {
		t.Fatalf("admitted %.0f/s, want about 1500", rate)
	}
}
