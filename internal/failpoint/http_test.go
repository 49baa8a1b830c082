package failpoint

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	defer Disable("p")
	do := func(method, path, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		method, path, body string
		status             int
		armed              bool // Inject("p") fails afterwards
	}{
		{http.MethodPut, "/p", "explode", http.StatusBadRequest, false},
		{http.MethodPut, "/p", "delay:x", http.StatusBadRequest, false},
		{http.MethodPut, "/p", "error", http.StatusOK, true},
		{http.MethodPut, "/p", "delay:1ms", http.StatusOK, false},
		{http.MethodPut, "/p", "error\n", http.StatusOK, true},
		{http.MethodPost, "/p", "error", http.StatusMethodNotAllowed, true},
		{http.MethodPut, "/", "error", http.StatusMethodNotAllowed, true},
		{http.MethodPut, "/p", "offset:x", http.StatusBadRequest, true},
		{http.MethodPut, "/p", "offset:-90s", http.StatusOK, false},
		{http.MethodDelete, "/p", "", http.StatusOK, false},
	}
	for i, s := range steps {
		if got := do(s.method, s.path, s.body); got != s.status {
			t.Fatalf("step %d: %s %s %q = %d, want %d", i, s.method, s.path, s.body, got, s.status)
		}
		if armed := Inject("p") != nil; armed != s.armed {
			t.Fatalf("step %d: point failing = %v, want %v", i, armed, s.armed)
		}
		if off := Offset("p"); (off != 0) != (s.body == "offset:-90s") || (off != 0 && off != -90*time.Second) {
			t.Fatalf("step %d: offset %v", i, off)
		}
	}
	if names := armedNames(); len(names) != 0 {
		t.Fatalf("armed after DELETE: %v", names)
	}
}

func TestServeFromEnvBadAddr(t *testing.T) {
	t.Setenv(AddrEnvVar, "not-an-address")
	err := ServeFromEnv()
	if err == nil || !strings.Contains(err.Error(), AddrEnvVar) {
		t.Fatalf("ServeFromEnv = %v, want an error naming %s", err, AddrEnvVar)
	}
}
