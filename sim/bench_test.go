package sim

import (
	"testing"
	"time"

	"tablestore/master/scheduler"
)

// BenchmarkFullScale is the target's configuration for a short time:
// go test -run - -bench FullScale ./sim -cpuprofile /tmp/cpu.out
func BenchmarkFullScale(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.EventAt = 6*time.Minute, time.Minute
	for i := 0; i < b.N; i++ {
		if _, err := Run(cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSchedule is one scheduler run over the target's cluster (1,000
// servers, 100,000 ranges) as the simulator hands it over:
// go test -run - -bench Schedule ./sim -cpuprofile /tmp/cpu.out
func BenchmarkSchedule(b *testing.B) {
	cfg := DefaultConfig()
	r := newRunner(cfg)
	r.measure(true)
	snap := r.snapshot()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		scheduler.Schedule(cfg.Scheduler, snap)
	}
}
