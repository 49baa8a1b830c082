package health

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMount(t *testing.T) {
	for _, tc := range []struct {
		name     string
		path     string
		verdict  Verdict
		wantCode int
		wantBody string
	}{
		{"live regardless", "/healthz", Verdict{Reasons: []string{"x"}}, 200, "ok"},
		{"ready", "/readyz", Verdict{}, 200, "ok"},
		{"not ready", "/readyz", Verdict{Reasons: []string{"no leader", "no map"}}, 503, "no leader\nno map"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			Mount(mux, func() Verdict { return tc.verdict })
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tc.path, rec.Code, rec.Body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	v := Join(map[string]Verdict{"ps2": {Reasons: []string{"b"}}, "ps1": {Reasons: []string{"a"}}, "m1": {}})
	if got := strings.Join(v.Reasons, ";"); got != "ps1: a;ps2: b" {
		t.Fatalf("Join = %q", got)
	}
	if (Join(map[string]Verdict{"m1": {}})).Ready() != true {
		t.Fatal("all ready should be ready")
	}
}
