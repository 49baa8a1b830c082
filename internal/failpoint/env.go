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
// "name=delay:50ms;other=error". delay sleeps and succeeds (a slow disk),
// error fails. It returns an error naming a malformed entry.
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
		fn, err := parseAction(action)
		if err != nil {
			return fmt.Errorf("%s: %w", EnvVar, err)
		}
		Enable(name, fn)
	}
	return nil
}

// ErrBadAction is what a malformed action is refused with.
var ErrBadAction = errors.New("failpoint: bad action (want delay:D or error)")

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
