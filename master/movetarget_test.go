package master

import (
	"errors"
	"testing"
)

// TestMoveTargetRefusal: an operator's move goes only to a known server
// that is up and not draining.
func TestMoveTargetRefusal(t *testing.T) {
	servers := map[string]drainView{
		"up":       {up: true},
		"down":     {},
		"draining": {up: true, draining: true},
		"gone":     {draining: true},
	}
	for _, tc := range []struct {
		to   string
		want error
	}{
		{"up", nil},
		{"down", ErrTargetUnfit},
		{"draining", ErrTargetUnfit},
		{"gone", ErrTargetUnfit},
		{"nosuch", ErrUnknownServer},
		{"", ErrBadTarget},
	} {
		t.Run(tc.to, func(t *testing.T) {
			err := moveTargetRefusal(tc.to, servers)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("moveTargetRefusal(%q) = %v, want %v", tc.to, err, tc.want)
			}
		})
	}
}
