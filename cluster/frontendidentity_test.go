package cluster

import (
	"slices"
	"testing"
	"time"

	"tablestore/frontend"
)

// TestFrontendIdentity: a front-end on a fixed port names it before its
// listener is bound (its first watch carries it, and binding changes
// nothing), one on port 0 only the address bound.
func TestFrontendIdentity(t *testing.T) {
	for _, tc := range []struct {
		configured, bound string
		want              []string
	}{
		{"0.0.0.0:10002", "", []string{"0.0.0.0:10002"}},
		{"0.0.0.0:10002", "0.0.0.0:10002", []string{"0.0.0.0:10002"}},
		{":10002", "[::]:10002", []string{":10002"}},
		{"127.0.0.1:0", "", nil},
		{"127.0.0.1:0", "127.0.0.1:41234", []string{"127.0.0.1:41234"}},
	} {
		cfg := frontend.DefaultConfig()
		cfg.HTTPAddr, cfg.MetricsAddr = tc.configured, "127.0.0.1:9091"
		got := frontendIdentity(cfg, tc.bound, time.Unix(0, 5))
		if !slices.Equal(got.GetHttpAddrs(), tc.want) || got.GetMetricsAddr() != "127.0.0.1:9091" || got.GetStartUnixNano() != 5 || got.GetVersion() == "" {
			t.Errorf("frontendIdentity(%q, bound %q) = %v, want http %v", tc.configured, tc.bound, got, tc.want)
		}
	}
}
