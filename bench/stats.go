package main

import "time"

// percentile is the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank rule: the smallest value with at least p % of the samples
// at or below it, sorted[ceil(p*n/100)-1]. Zero for no samples.
func percentile(sorted []time.Duration, p int) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	k := (n*p + 99) / 100 // ceil(n*p/100), in integers: 0.99*100 is not exact in floats
	return sorted[max(k, 1)-1]
}
