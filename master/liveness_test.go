package master

import (
	"testing"
	"time"
)

func TestServerUp(t *testing.T) {
	const timeout = 5 * time.Second
	for _, tc := range []struct {
		name   string
		heard  bool
		silent time.Duration
		want   bool
	}{
		{"just heard", true, 0, true},
		{"silent just under the timeout", true, timeout - time.Nanosecond, true},
		{"silent for the timeout", true, timeout, false},
		{"silent longer", true, time.Hour, false},
		{"never heard", false, 0, false},
	} {
		if got := serverUp(tc.heard, tc.silent, timeout); got != tc.want {
			t.Errorf("%s: serverUp(%v, %v) = %v, want %v", tc.name, tc.heard, tc.silent, got, tc.want)
		}
	}
}
