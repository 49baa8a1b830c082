package failpoint

import (
	"errors"
	"testing"
	"time"
)

func TestEnableDisable(t *testing.T) {
	cases := []struct {
		name string
		fn   func() error
		want error
	}{
		{"default error", nil, ErrInjected},
		{"custom error", func() error { return errTest }, errTest},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := Inject("p"); err != nil {
				t.Fatalf("disarmed point returned %v", err)
			}
			Enable("p", c.fn)
			if err := Inject("p"); !errors.Is(err, c.want) {
				t.Fatalf("armed point returned %v, want %v", err, c.want)
			}
			if err := Inject("other"); err != nil {
				t.Fatalf("other point returned %v", err)
			}
			Disable("p")
			if err := Inject("p"); err != nil {
				t.Fatalf("disabled point returned %v", err)
			}
		})
	}
}

var errTest = errors.New("test")

func TestEnableFromEnv(t *testing.T) {
	cases := []struct {
		spec string
		ok   bool
	}{
		{"", true},
		{"a=delay:1ms;b=error", true},
		{"a", false},
		{"a=delay:x", false},
		{"a=explode", false},
		{"a=offset:-90s;b=error", true},
		{"a=offset:soon", false},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			t.Setenv(EnvVar, c.spec)
			err := EnableFromEnv()
			defer Disable("a")
			defer Disable("b")
			if (err == nil) != c.ok {
				t.Fatalf("EnableFromEnv(%q) = %v", c.spec, err)
			}
			if c.spec == "a=delay:1ms;b=error" && (Inject("a") != nil || Inject("b") == nil) {
				t.Fatal("points not armed as specified")
			}
			if c.spec == "a=offset:-90s;b=error" && (Offset("a") != -90*time.Second || Inject("a") != nil || Inject("b") == nil) {
				t.Fatal("points not armed as specified")
			}
		})
	}
}

// TestOffset: an offset point returns its duration until disarmed, fails
// nothing, and replaces (or is replaced by) a failure point of its name.
func TestOffset(t *testing.T) {
	defer Disable("clock")
	steps := []struct {
		do      func()
		offset  time.Duration
		failing bool // Inject("clock") fails
	}{
		{func() {}, 0, false},
		{func() { EnableOffset("clock", 90*time.Second) }, 90 * time.Second, false},
		{func() { EnableOffset("clock", -15*time.Second) }, -15 * time.Second, false},
		{func() { Enable("other", nil) }, -15 * time.Second, false},
		{func() { Enable("clock", nil) }, 0, true},
		{func() { EnableOffset("clock", time.Minute) }, time.Minute, false},
		{func() { Disable("clock") }, 0, false},
		{func() { Disable("other") }, 0, false},
	}
	for i, s := range steps {
		s.do()
		if got := Offset("clock"); got != s.offset {
			t.Fatalf("step %d: Offset = %v, want %v", i, got, s.offset)
		}
		if failing := Inject("clock") != nil; failing != s.failing {
			t.Fatalf("step %d: Inject failing = %v, want %v", i, failing, s.failing)
		}
		if got := Offset("elsewhere"); got != 0 {
			t.Fatalf("step %d: an unarmed point's offset = %v", i, got)
		}
	}
	if armed.Load() != 0 || offsetsArmed.Load() != 0 {
		t.Fatalf("counts after disarming all: %d points, %d offsets", armed.Load(), offsetsArmed.Load())
	}
}
