package sim

import (
	"testing"
	"time"
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
