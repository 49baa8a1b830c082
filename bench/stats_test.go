package main

import (
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ramp := func(n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(i + 1)
		}
		return out
	}
	for _, c := range []struct {
		name string
		in   []time.Duration
		p    int
		want time.Duration
	}{
		{"none", nil, 50, 0},
		{"one", ramp(1), 99, 1},
		{"median of odd", ramp(3), 50, 2},
		{"median of even: the lower middle", ramp(4), 50, 2},
		{"p99 of 100 is not the maximum", ramp(100), 99, 99},
		{"p99 of 200", ramp(200), 99, 198},
		{"p99 of 1000", ramp(1000), 99, 990},
		{"p99 of 50: the maximum", ramp(50), 99, 50},
		{"p100", ramp(7), 100, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := percentile(c.in, c.p); got != c.want {
				t.Errorf("percentile(%d samples, %d) = %d, want %d", len(c.in), c.p, got, c.want)
			}
		})
	}
}

// Azurite runs without telemetry unless asked (its records and failed
// exports are CPU of their own, counted as its cost per entity), and never
// with --location beside --inMemoryPersistence (it refuses to start).
func TestAzuriteArgs(t *testing.T) {
	for _, c := range []struct {
		name string
		o    options
		want string
	}{
		{"default", options{}, "--location /d --disableTelemetry"},
		{"in memory", options{azuriteMemory: true}, "--inMemoryPersistence --disableTelemetry"},
		{"telemetry asked for", options{azuriteTelemetry: true}, "--location /d"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := strings.Join(azuriteArgs(c.o, "/d"), " "); got != c.want {
				t.Errorf("azuriteArgs = %q, want %q", got, c.want)
			}
		})
	}
}
