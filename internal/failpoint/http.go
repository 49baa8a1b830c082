package failpoint

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
)

// AddrEnvVar names the environment variable ServeFromEnv reads: an
// address on which a harness arms and disarms points while the process
// runs (etcd's gofail serves the same way under GOFAIL_HTTP). Arming by
// restart would add a crash to every disk fault: a slow disk would also be
// a kill -9 and a restart of its server (chaos seed 235, session 9).
const AddrEnvVar = "TABLESTORE_FAILPOINTS_ADDR"

// ServeFromEnv serves Handler on $TABLESTORE_FAILPOINTS_ADDR, if set, for
// the life of the process. It returns an error naming the address when it
// cannot listen there.
func ServeFromEnv() error {
	addr := os.Getenv(AddrEnvVar)
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", AddrEnvVar, addr, err)
	}
	go func() {
		if err := http.Serve(ln, Handler()); err != nil && !errors.Is(err, net.ErrClosed) {
			slog.Warn("failpoint endpoint stopped", "addr", addr, "err", err)
		}
	}()
	return nil
}

// Handler arms and disarms points: PUT /name with an action as the body
// ("delay:150ms", "error", "offset:-90s"), DELETE /name, GET / lists the
// armed names.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		switch {
		case r.Method == http.MethodGet && name == "":
			for _, n := range armedNames() {
				fmt.Fprintln(w, n)
			}
		case r.Method == http.MethodPut && name != "":
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<10))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if err := arm(name, strings.TrimSpace(string(body))); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			slog.Warn("failpoint armed", "name", name, "action", strings.TrimSpace(string(body)))
		case r.Method == http.MethodDelete && name != "":
			Disable(name)
			slog.Warn("failpoint disarmed", "name", name)
		default:
			http.Error(w, "failpoint: PUT /name (body delay:D, error or offset:D), DELETE /name or GET /", http.StatusMethodNotAllowed)
		}
	})
}

// armedNames lists the armed points, sorted.
func armedNames() []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(points)+len(offsets))
	for n := range points {
		out = append(out, n)
	}
	for n := range offsets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
