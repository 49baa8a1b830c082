package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// EnvVar names the environment variable EnableFromEnv reads, so a test
// harness can arm points in a process it starts (chaos/).
const EnvVar = "TABLESTORE_FAILPOINTS"

// EnableFromEnv arms the points listed in $TABLESTORE_FAILPOINTS:
// "name=delay:50ms;other=error;clock=offset:-90s". delay sleeps and
// succeeds (a slow disk), error fails, offset arms an offset point (read
// by Offset). It returns an error naming a malformed entry.
func EnableFromEnv() error {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return nil
	}
	for _, item := range strings.Split(spec, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok || name == "" {
			return fmt.Errorf("failpoint: %s: %q is not name=action", EnvVar, item)
		}
		if err := arm(name, action); err != nil {
			return fmt.Errorf("%s: %w", EnvVar, err)
		}
	}
	return nil
}

// arm arms point name with action: "error", "delay:D" or "offset:D".
func arm(name, action string) error {
	if v, ok := strings.CutPrefix(action, "offset:"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%w: bad offset %q", ErrBadAction, action)
		}
		EnableOffset(name, d)
		return nil
	}
	fn, err := parseAction(action)
	if err != nil {
		return err
	}
	Enable(name, fn)
	return nil
}

// ErrBadAction is what a malformed action is refused with.
var ErrBadAction = errors.New("failpoint: bad action (want delay:D, error or offset:D)")

// parseAction turns "error" or "delay:D" into what Inject calls: delay
// sleeps and succeeds (a slow disk), error fails.
func parseAction(action string) (func() error, error) {
	switch {
	case action == "error":
		return nil, nil
	case strings.HasPrefix(action, "delay:"):
		d, err := time.ParseDuration(strings.TrimPrefix(action, "delay:"))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%w: bad delay %q", ErrBadAction, action)
		}
		return func() error { time.Sleep(d); return nil }, nil
	default:
		return nil, fmt.Errorf("%w: %q", ErrBadAction, action)
	}
}
