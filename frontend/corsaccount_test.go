package frontend

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tablestore/frontend/auth"
)

// The accounts of the per-account service properties tests.
const (
	acctOneKey = "YWNjdG9uZWtleQ=="
	acctTwoKey = "YWNjdHR3b2tleQ=="
)

// newAccountsServer is a front-end serving devstoreaccount1 (the primary
// account), acctone and accttwo, path-style and host-style.
func newAccountsServer(t *testing.T) (*Server, *fakeBackend) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.HostStyle = true
	cfg.Accounts = auth.DevAccountName + ":" + auth.DevAccountKey + ";acctone:" + acctOneKey + ";accttwo:" + acctTwoKey
	fb := newFakeBackend()
	s, err := NewServer(cfg, fb, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, fb
}

// accountRequest is a request signed (SharedKeyLite) by account, path-style.
func accountRequest(t *testing.T, method, account, key, target, body string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, "http://127.0.0.1:10002/"+account+target, strings.NewReader(body))
	r.Header.Set("x-ms-version", "2019-02-02")
	if body != "" {
		r.Header.Set("Content-Type", "application/xml")
	}
	acct, err := auth.NewAccount(account, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.SignSharedKeyLite(r, acct); err != nil {
		t.Fatal(err)
	}
	return r
}

const acctOneRules = `<StorageServiceProperties><Cors><CorsRule><AllowedOrigins>http://one.example</AllowedOrigins>` +
	`<AllowedMethods>GET,PUT</AllowedMethods><AllowedHeaders>x-ms-*</AllowedHeaders><ExposedHeaders>x-ms-request-id</ExposedHeaders>` +
	`<MaxAgeInSeconds>30</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>`

// TestServicePropertiesPerAccount: an account's Set Service Properties is
// its own; another account (and the primary one) keeps the defaults, and
// the primary account's document is the backend's unnamed one (the one
// document of the builds before per-account properties).
func TestServicePropertiesPerAccount(t *testing.T) {
	s, fb := newAccountsServer(t)
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		return rec
	}
	if rec := serve(accountRequest(t, "PUT", "acctone", acctOneKey, "/?restype=service&comp=properties", acctOneRules)); rec.Code != http.StatusAccepted {
		t.Fatalf("set acctone: %d %s", rec.Code, rec.Body)
	}
	if len(fb.serviceProps["acctone"]) == 0 || len(fb.serviceProps[""]) != 0 || len(fb.serviceProps["accttwo"]) != 0 {
		t.Fatalf("stored %q", fb.serviceProps)
	}
	for _, tc := range []struct {
		account, key string
		cors         bool
	}{{"acctone", acctOneKey, true}, {"accttwo", acctTwoKey, false}, {auth.DevAccountName, auth.DevAccountKey, false}} {
		rec := serve(accountRequest(t, "GET", tc.account, tc.key, "/?restype=service&comp=properties", ""))
		if rec.Code != http.StatusOK {
			t.Fatalf("get %s: %d %s", tc.account, rec.Code, rec.Body)
		}
		if got := strings.Contains(rec.Body.String(), "http://one.example"); got != tc.cors {
			t.Errorf("%s's properties show acctone's rule: %v, want %v\n%s", tc.account, got, tc.cors, rec.Body)
		}
	}
	// The primary account's set is stored under the unnamed document.
	if rec := serve(accountRequest(t, "PUT", auth.DevAccountName, auth.DevAccountKey, "/?restype=service&comp=properties",
		`<StorageServiceProperties><Cors/></StorageServiceProperties>`)); rec.Code != http.StatusAccepted {
		t.Fatalf("set devstoreaccount1: %d %s", rec.Code, rec.Body)
	}
	if len(fb.serviceProps[""]) == 0 || !strings.Contains(string(fb.serviceProps["acctone"]), "http://one.example") {
		t.Fatalf("stored %q", fb.serviceProps)
	}
}

// TestCORSPerAccount: preflight and actual-request CORS use the rules of
// the account the request addresses, path-style, production-style host and
// their -secondary forms.
func TestCORSPerAccount(t *testing.T) {
	s, _ := newAccountsServer(t)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, accountRequest(t, "PUT", "acctone", acctOneKey, "/?restype=service&comp=properties", acctOneRules))
	if rec.Code != http.StatusAccepted {
		t.Fatalf("set acctone: %d %s", rec.Code, rec.Body)
	}
	tests := []struct {
		name, url string
		allowed   bool
	}{
		{"path-style", "http://127.0.0.1:10002/acctone/t()", true},
		{"path-style secondary", "http://127.0.0.1:10002/acctone-secondary/t()", true},
		{"host-style", "http://acctone.table.localhost:10002/t()", true},
		{"host-style secondary", "http://acctone-secondary.table.localhost:10002/t()", true},
		{"other account path-style", "http://127.0.0.1:10002/accttwo/t()", false},
		{"other account secondary", "http://127.0.0.1:10002/accttwo-secondary/t()", false},
		{"other account host-style", "http://accttwo.table.localhost:10002/t()", false},
		{"primary account", "http://127.0.0.1:10002/devstoreaccount1/t()", false},
		{"unknown account", "http://127.0.0.1:10002/nosuch/t()", false},
	}
	for _, tt := range tests {
		t.Run(tt.name+" preflight", func(t *testing.T) {
			r := httptest.NewRequest("OPTIONS", tt.url, nil)
			r.Header.Set("Origin", "http://one.example")
			r.Header.Set("Access-Control-Request-Method", "GET")
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if tt.allowed {
				if rec.Code != http.StatusOK || rec.Header().Get("Access-Control-Allow-Origin") != "http://one.example" || rec.Header().Get("Access-Control-Max-Age") != "30" {
					t.Fatalf("%d %v", rec.Code, rec.Header())
				}
				return
			}
			if rec.Code != http.StatusForbidden || rec.Header().Get("x-ms-error-code") != "CorsPreflightFailure" {
				t.Fatalf("%d %s %v", rec.Code, rec.Header().Get("x-ms-error-code"), rec.Header())
			}
		})
		t.Run(tt.name+" actual request", func(t *testing.T) {
			// Unsigned: the error answer carries the CORS headers too.
			r := httptest.NewRequest("GET", tt.url, nil)
			r.Header.Set("Origin", "http://one.example")
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			got := rec.Header().Get("Access-Control-Allow-Origin")
			if tt.allowed && got != "http://one.example" {
				t.Fatalf("Access-Control-Allow-Origin %q (%d)", got, rec.Code)
			}
			if !tt.allowed && (got != "" || rec.Header().Get("Vary") != "") {
				t.Fatalf("another account's rules applied: %v", rec.Header())
			}
		})
	}
}

func TestPropsKey(t *testing.T) {
	s, _ := newAccountsServer(t)
	for _, tc := range []struct{ account, want string }{
		{auth.DevAccountName, ""}, // the primary account: the document kept before accounts
		{"", ""},
		{"acctone", "acctone"},
	} {
		if got := s.propsKey(tc.account); got != tc.want {
			t.Errorf("propsKey(%q) = %q, want %q", tc.account, got, tc.want)
		}
	}
}
