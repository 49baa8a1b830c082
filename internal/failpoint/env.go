package failpoint

import (
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
		switch {
		case action == "error":
			Enable(name, nil)
		case strings.HasPrefix(action, "delay:"):
			d, err := time.ParseDuration(strings.TrimPrefix(action, "delay:"))
			if err != nil || d < 0 {
				return fmt.Errorf("failpoint: %s: bad delay in %q", EnvVar, item)
			}
			Enable(name, func() error { time.Sleep(d); return nil })
		default:
			return fmt.Errorf("failpoint: %s: unknown action in %q (delay:D or error)", EnvVar, item)
		}
	}
	return nil
}
