package health

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// Verdict is a role's readiness decision: ready, or the reasons it is not.
type Verdict struct {
	Reasons []string
}

// Ready reports whether nothing holds the role back.
func (v Verdict) Ready() bool { return len(v.Reasons) == 0 }

// Notf adds a reason the role is not ready.
func (v *Verdict) Notf(format string, args ...any) {
	v.Reasons = append(v.Reasons, fmt.Sprintf(format, args...))
}

// Join merges verdicts (a dev process runs every role; it is ready when all
// of them are), prefixing each reason with its source's name.
func Join(named map[string]Verdict) Verdict {
	var out Verdict
	for _, name := range sortedNames(named) {
		for _, r := range named[name].Reasons {
			out.Reasons = append(out.Reasons, name+": "+r)
		}
	}
	return out
}

func sortedNames(m map[string]Verdict) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Mux is where the endpoints are mounted (the metrics listener).
type Mux interface {
	Handle(pattern string, h http.Handler)
}

// Mount serves /healthz (200 while the process serves HTTP) and /readyz
// (200 "ok" when ready() has no reasons, else 503 with one reason a line).
func Mount(m Mux, ready func() Verdict) {
	m.Handle("/healthz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	}))
	m.Handle("/readyz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		v := ready()
		if v.Ready() {
			fmt.Fprintln(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready:\n"+strings.Join(v.Reasons, "\n"))
	}))
}
