package scheduler

import (
	"errors"
	"strings"
	"testing"
)

// TestConfigValidate: the defaults pass, and each bad value is refused
// with ErrInvalidConfig and a message naming its flag.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Config)
		flag string // "" : valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"merge load not below split load", func(c *Config) { c.MergeLoad = c.SplitLoad }, "merge-load"},
		{"no moves per server", func(c *Config) { c.MaxPerServer = 0 }, "max-per-server"},
		{"no ranges per group", func(c *Config) { c.MaxGroupSpans = 0 }, "max-group-spans"},
		{"one range per group", func(c *Config) { c.MaxGroupSpans = 1 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.set(&c)
			err := c.Validate()
			switch {
			case tc.flag == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.flag != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.flag)):
				t.Fatalf("got %v, want ErrInvalidConfig naming %s", err, tc.flag)
			}
		})
	}
}
