package failpoint

import (
	"errors"
	"testing"
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
		})
	}
}
