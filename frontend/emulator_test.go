package frontend

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tablestore/frontend/auth"
)

// TestEmulatorFlags parses Azurite command lines translated to tablestore
// flags and checks the resulting configuration.
func TestEmulatorFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		check   func(c Config) bool
		invalid string // Validate's error, when it must fail
	}{
		{"https pem and oauth", "-cert c.pem -key k.pem -oauth basic",
			func(c Config) bool {
				return c.CertFile == "c.pem" && c.KeyFile == "k.pem" && c.OAuth == "basic" && c.Scheme() == "https"
			}, ""},
		{"https pfx", "-cert c.pfx -pwd secret", func(c Config) bool { return c.CertPassword == "secret" && c.Scheme() == "https" }, ""},
		{"switches", "-skip-api-version-check -disable-product-style-url -loose",
			func(c Config) bool { return c.SkipAPIVersionCheck && !c.HostStyle && c.Loose }, ""},
		{"switch off again", "-disable-product-style-url=false", func(c Config) bool { return c.HostStyle }, ""},
		{"accounts", "-accounts acct1:a2V5MQ==:a2V5Mg==;acct2:a2V5Mw==", func(c Config) bool {
			accts, err := c.servedAccounts()
			name, key := c.Endpoint()
			return err == nil && len(accts) == 3 && name == "acct1" && key == "a2V5MQ=="
		}, ""},
		{"oauth without https", "-oauth basic", nil, "needs HTTPS"},
		{"unknown oauth level", "-cert c.pem -key k.pem -oauth full", nil, "only level is basic"},
		{"pem without key", "-cert c.pem", nil, "--cert and --key go together"},
		{"bad accounts", "-accounts acct1", nil, "want name:key1[:key2]"},
		{"bad account key", "-accounts acct1:@@", nil, "not base64"},
		{"bad account name", "-accounts Acct_1:a2V5MQ==", nil, "lowercase letters"},
		{"account twice", "-accounts acct1:a2V5MQ==;acct1:a2V5Mg==", nil, "twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			c.RegisterFlags(fs)
			if err := fs.Parse(strings.Fields(tc.args)); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if tc.invalid != "" {
				if err == nil || !strings.Contains(err.Error(), tc.invalid) {
					t.Fatalf("Validate = %v, want %q", err, tc.invalid)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("Validate = %v, config %+v", err, c)
			}
		})
	}
}

// TestAccountsReplaceDefault checks that, as in Azurite, configured
// accounts replace devstoreaccount1 on a backend without a registry.
func TestAccountsReplaceDefault(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Accounts = "solo:c29sb2tleQ=="
	s, err := NewServer(cfg, newFakeBackend(), nil)
	if err != nil {
		t.Fatal(err)
	}
	solo, _ := auth.NewAccount("solo", "c29sb2tleQ==")
	for _, tc := range []struct {
		acct auth.Account
		want int
	}{{solo, http.StatusOK}, {auth.DevAccount(), http.StatusForbidden}} {
		r := httptest.NewRequest("GET", "http://127.0.0.1:10002/"+tc.acct.Name+"/Tables", nil)
		r.Header.Set("x-ms-version", "2019-02-02")
		if err := auth.SignSharedKeyLite(r, tc.acct); err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		if rec.Code != tc.want {
			t.Fatalf("%s: %d %s, want %d", tc.acct.Name, rec.Code, rec.Header().Get("x-ms-error-code"), tc.want)
		}
	}
}
