package auth

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

var (
	sasStart = time.Date(2006, 1, 2, 0, 0, 0, 0, time.UTC)
	sasEnd   = time.Date(2006, 1, 3, 0, 0, 0, 0, time.UTC)
	sasNow   = time.Date(2006, 1, 2, 12, 0, 0, 0, time.UTC)
)

// Computed with openssl (see sharedkey_test.go) over:
const (
	// "raud\n2006-01-02T00:00:00Z\n2006-01-03T00:00:00Z\n/table/devstoreaccount1/mytable\n\n\nhttps,http\n2019-02-02\na\n\nz\n"
	kaServiceSAS = "QH8kKYKG9nhwYuburlnVh/eP7QjDWdXwa3958+oqDjo="
	// "devstoreaccount1\nrwdlacu\nt\nsco\n2006-01-02T00:00:00Z\n2006-01-03T00:00:00Z\n\nhttps,http\n2019-02-02\n"
	kaAccountSAS = "cH8vRYZ2Q5lHCVpN9f2Momk4+DOcwRWLGt+6+kNSG6Y="
	// same with sv=2021-06-08 and an empty ses line: "...\n2021-06-08\n\n"
	kaAccountSAS2021 = "ozU4KEg82xNnloUHpPDHJu1E2xmN4bjvxgiW1XwFaF8="
)

func sasRequest(target string, q url.Values) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:10002"+target+"?"+q.Encode(), nil)
	r.RemoteAddr = "127.0.0.1:51234"
	return r
}

func TestSASKnownAnswers(t *testing.T) {
	a := authAt(sasNow)
	t.Run("service SAS (tn=MyTable signed lower-case)", func(t *testing.T) {
		q := url.Values{"sv": {"2019-02-02"}, "tn": {"MyTable"}, "sp": {"raud"}, "st": {"2006-01-02T00:00:00Z"},
			"se": {"2006-01-03T00:00:00Z"}, "spr": {"https,http"}, "spk": {"a"}, "epk": {"z"}, "sig": {kaServiceSAS}}
		p, err := a.Authenticate(sasRequest("/devstoreaccount1/MyTable()", q))
		if err != nil {
			t.Fatal(err)
		}
		kr, ok := p.KeyRange()
		if p.Kind() != PrincipalServiceSAS || p.Table() != "mytable" || !ok || kr.StartPartitionKey != "a" || kr.EndPartitionKey != "z" || p.SignedVersion() != "2019-02-02" {
			t.Fatalf("principal %+v range %+v", p, kr)
		}
		// Our encoder produces the same signature.
		v, err := ServiceSAS{Table: "MyTable", Permissions: "raud", Start: sasStart, Expiry: sasEnd, Protocol: ProtocolHTTPSAndHTTP,
			StartPartitionKey: "a", EndPartitionKey: "z"}.Encode(DevAccount())
		if err != nil {
			t.Fatal(err)
		}
		if v.Get("sig") != kaServiceSAS || v.Get("tn") != "mytable" || v.Get("spk") != "a" || v.Get("epk") != "z" {
			t.Fatalf("Encode = %v", v)
		}
	})
	for _, tc := range []struct{ name, sv, sig string }{
		{"account SAS 2019-02-02", "2019-02-02", kaAccountSAS},
		{"account SAS 2021-06-08 (ses line)", "2021-06-08", kaAccountSAS2021},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := url.Values{"sv": {tc.sv}, "ss": {"t"}, "srt": {"sco"}, "sp": {"rwdlacu"}, "st": {"2006-01-02T00:00:00Z"},
				"se": {"2006-01-03T00:00:00Z"}, "spr": {"https,http"}, "sig": {tc.sig}}
			p, err := a.Authenticate(sasRequest("/devstoreaccount1/Tables", q))
			if err != nil {
				t.Fatal(err)
			}
			if p.Kind() != PrincipalAccountSAS {
				t.Fatalf("kind %v", p.Kind())
			}
			v, err := AccountSAS{Version: tc.sv, Services: "t", ResourceTypes: "sco", Permissions: "rwdlacu", Start: sasStart, Expiry: sasEnd,
				Protocol: ProtocolHTTPSAndHTTP}.Encode(DevAccount())
			if err != nil {
				t.Fatal(err)
			}
			if v.Get("sig") != tc.sig {
				t.Fatalf("Encode sig %s, want %s", v.Get("sig"), tc.sig)
			}
		})
	}
	t.Run("reference implementation agrees", func(t *testing.T) {
		sts := "raud\n2006-01-02T00:00:00Z\n2006-01-03T00:00:00Z\n/table/devstoreaccount1/mytable\n\n\nhttps,http\n2019-02-02\na\n\nz\n"
		if got := refSign(t, sts); got != kaServiceSAS {
			t.Fatalf("%s != %s", got, kaServiceSAS)
		}
	})
	t.Run("ses is signed from 2020-12-06", func(t *testing.T) {
		v, err := AccountSAS{Version: "2021-06-08", Services: "t", ResourceTypes: "o", Permissions: "r", Expiry: sasEnd, EncryptionScope: "scope1"}.Encode(DevAccount())
		if err != nil {
			t.Fatal(err)
		}
		want := refSign(t, "devstoreaccount1\nr\nt\no\n\n2006-01-03T00:00:00Z\n\n\n2021-06-08\nscope1\n")
		if v.Get("sig") != want || v.Get("ses") != "scope1" {
			t.Fatalf("got %v want sig %s", v, want)
		}
		v.Set("ses", "scope2")
		if _, err := a.Authenticate(sasRequest("/devstoreaccount1/t()", v)); !errors.Is(err, ErrAuthenticationFailed) {
			t.Fatalf("tampered ses must fail, got %v", err)
		}
	})
}

func serviceSAS(t *testing.T, s ServiceSAS) url.Values {
	t.Helper()
	if s.Table == "" {
		s.Table = "mytable"
	}
	if s.Expiry.IsZero() && s.Identifier == "" {
		s.Expiry = sasEnd
	}
	if s.Permissions == "" && s.Identifier == "" {
		s.Permissions = "raud"
	}
	v, err := s.Encode(DevAccount())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSASValidity(t *testing.T) {
	tests := []struct {
		name    string
		q       func(t *testing.T) url.Values
		now     time.Time
		mutate  func(r *http.Request)
		wantErr error
		reason  string
	}{
		{name: "valid", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{Start: sasStart}) }},
		{name: "no start", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{}) }},
		{name: "expired", now: sasEnd.Add(time.Second), q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{}) },
			wantErr: ErrAuthenticationFailed, reason: "expired"},
		{name: "at expiry", now: sasEnd, q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{}) }},
		{name: "not yet valid (no skew allowance for SAS)", now: sasStart.Add(-time.Second), q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{Start: sasStart}) },
			wantErr: ErrAuthenticationFailed, reason: "not valid yet"},
		{name: "date-only times", now: sasStart, q: func(t *testing.T) url.Values {
			return signRaw(t, url.Values{"sv": {"2019-02-02"}, "tn": {"mytable"}, "sp": {"r"}, "st": {"2006-01-02"}, "se": {"2006-01-03"}})
		}},
		{name: "minute precision and fraction", q: func(t *testing.T) url.Values {
			return signRaw(t, url.Values{"sv": {"2019-02-02"}, "tn": {"mytable"}, "sp": {"r"}, "st": {"2006-01-02T00:00Z"}, "se": {"2006-01-02T23:59:59.1234567Z"}})
		}},
		{name: "tampered permissions", q: func(t *testing.T) url.Values {
			v := serviceSAS(t, ServiceSAS{Permissions: "r"})
			v.Set("sp", "raud")
			return v
		}, wantErr: ErrAuthenticationFailed, reason: "signature does not match"},
		{name: "tampered expiry", q: func(t *testing.T) url.Values {
			v := serviceSAS(t, ServiceSAS{})
			v.Set("se", "2099-01-01T00:00:00Z")
			return v
		}, wantErr: ErrAuthenticationFailed, reason: "signature does not match"},
		{name: "spk dropped (what aztables GetTableSASURL sends)", q: func(t *testing.T) url.Values {
			v := serviceSAS(t, ServiceSAS{StartPartitionKey: "a"})
			v.Del("spk")
			return v
		}, wantErr: ErrAuthenticationFailed, reason: "signature does not match"},
		{name: "signed by another key", q: func(t *testing.T) url.Values {
			v, err := ServiceSAS{Table: "mytable", Permissions: "r", Expiry: sasEnd}.Encode(Account{Name: DevAccountName, Key: []byte("other")})
			if err != nil {
				t.Fatal(err)
			}
			return v
		}, wantErr: ErrAuthenticationFailed, reason: "signature does not match"},
		{name: "unencoded plus in sig", q: func(t *testing.T) url.Values {
			// Vary the expiry until the signature contains a '+'.
			for i := 0; i < 100; i++ {
				v := serviceSAS(t, ServiceSAS{Expiry: sasEnd.Add(time.Duration(i) * time.Second)})
				if strings.Contains(v.Get("sig"), "+") {
					return v
				}
			}
			t.Fatal("no signature with '+' found")
			return nil
		}, mutate: func(r *http.Request) {
			if !strings.Contains(r.URL.RawQuery, "%2B") {
				panic("test setup: no encoded plus")
			}
			r.URL.RawQuery = strings.ReplaceAll(r.URL.RawQuery, "%2B", "+")
		}},
		{name: "sip allows", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{IPRange: "127.0.0.1"}) }},
		{name: "sip range allows", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{IPRange: "10.0.0.1-10.0.0.9"}) },
			mutate: func(r *http.Request) { r.RemoteAddr = "10.0.0.9:1" }},
		{name: "sip allows IPv4-mapped client", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{IPRange: "127.0.0.1"}) },
			mutate: func(r *http.Request) { r.RemoteAddr = "[::ffff:127.0.0.1]:1" }},
		{name: "sip rejects", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{IPRange: "10.0.0.1-10.0.0.9"}) },
			wantErr: ErrAuthorizationSourceIPMismatch},
		{name: "sip rejects IPv6 client for IPv4 range", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{IPRange: "127.0.0.1"}) },
			mutate: func(r *http.Request) { r.RemoteAddr = "[::1]:1" }, wantErr: ErrAuthorizationSourceIPMismatch},
		{name: "sip rejects unparseable remote", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{IPRange: "127.0.0.1"}) },
			mutate: func(r *http.Request) { r.RemoteAddr = "pipe" }, wantErr: ErrAuthorizationSourceIPMismatch},
		{name: "spr https over http", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{Protocol: ProtocolHTTPS}) },
			wantErr: ErrAuthorizationProtocolMismatch},
		{name: "spr https over https", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{Protocol: ProtocolHTTPS}) },
			mutate: func(r *http.Request) { r.TLS = &tls.ConnectionState{} }},
		{name: "spr https,http over http", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{Protocol: ProtocolHTTPSAndHTTP}) }},
		{name: "account SAS https only over http", q: func(t *testing.T) url.Values {
			v, err := AccountSAS{Services: "t", ResourceTypes: "o", Permissions: "r", Expiry: sasEnd, Protocol: ProtocolHTTPS}.Encode(DevAccount())
			if err != nil {
				t.Fatal(err)
			}
			return v
		}, wantErr: ErrAuthorizationProtocolMismatch},
		{name: "account SAS expired", now: sasEnd.Add(time.Hour), q: func(t *testing.T) url.Values {
			v, err := AccountSAS{Services: "t", ResourceTypes: "o", Permissions: "r", Expiry: sasEnd}.Encode(DevAccount())
			if err != nil {
				t.Fatal(err)
			}
			return v
		}, wantErr: ErrAuthenticationFailed, reason: "expired"},
		{name: "authorization header wins over SAS", q: func(t *testing.T) url.Values { return serviceSAS(t, ServiceSAS{}) },
			mutate: func(r *http.Request) { r.Header.Set("Authorization", "Bearer x") }, wantErr: ErrAuthenticationFailed, reason: "unsupported Authorization scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = sasNow
			}
			r := sasRequest("/devstoreaccount1/mytable()", tc.q(t))
			if tc.mutate != nil {
				tc.mutate(r)
			}
			_, err := authAt(now).Authenticate(r)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("want %v containing %q, got %v", tc.wantErr, tc.reason, err)
			}
		})
	}
}

// signRaw signs a hand-built service SAS with the documented string-to-sign.
func signRaw(t *testing.T, q url.Values) url.Values {
	t.Helper()
	g := q.Get
	sts := strings.Join([]string{g("sp"), g("st"), g("se"), "/table/devstoreaccount1/" + strings.ToLower(g("tn")), g("si"), g("sip"), g("spr"), g("sv"),
		g("spk"), g("srk"), g("epk"), g("erk")}, "\n")
	q.Set("sig", refSign(t, sts))
	return q
}

func TestParseSASMalformed(t *testing.T) {
	base := func() url.Values {
		return url.Values{"sv": {"2019-02-02"}, "tn": {"t1"}, "sp": {"r"}, "se": {"2006-01-03T00:00:00Z"}, "sig": {"AAAA"}}
	}
	acct := func() url.Values {
		return url.Values{"sv": {"2019-02-02"}, "ss": {"t"}, "srt": {"o"}, "sp": {"r"}, "se": {"2006-01-03T00:00:00Z"}, "sig": {"AAAA"}}
	}
	tests := []struct {
		name   string
		q      url.Values
		reason string
	}{
		{"no sig", func() url.Values { v := base(); v.Del("sig"); return v }(), "no sig"},
		{"sig not base64", func() url.Values { v := base(); v.Set("sig", "%%%"); return v }(), "not base64"},
		{"duplicate sig", func() url.Values { v := base(); v.Add("sig", "AAAA"); return v }(), "more than once"},
		{"duplicate tn", func() url.Values { v := base(); v.Add("tn", "t2"); return v }(), "more than once"},
		{"no sv", func() url.Values { v := base(); v.Del("sv"); return v }(), "sv"},
		{"bad sv", func() url.Values { v := base(); v.Set("sv", "2019-2-2"); return v }(), "sv"},
		{"old sv", func() url.Values { v := base(); v.Set("sv", "2013-08-15"); return v }(), "older than"},
		{"bad spr", func() url.Values { v := base(); v.Set("spr", "http"); return v }(), "spr"},
		{"bad sip", func() url.Values { v := base(); v.Set("sip", "localhost"); return v }(), "sip"},
		{"descending sip", func() url.Values { v := base(); v.Set("sip", "10.0.0.9-10.0.0.1"); return v }(), "ascending"},
		{"mixed family sip", func() url.Values { v := base(); v.Set("sip", "10.0.0.1-::1"); return v }(), "family"},
		{"bad se", func() url.Values { v := base(); v.Set("se", "tomorrow"); return v }(), "ISO 8601"},
		{"bad st", func() url.Values { v := base(); v.Set("st", "2006-13-01"); return v }(), "ISO 8601"},
		{"service bad sp letter", func() url.Values { v := base(); v.Set("sp", "rw"); return v }(), "allowed letters"},
		{"srk without spk", func() url.Values { v := base(); v.Set("srk", "r"); return v }(), "srk requires spk"},
		{"erk without epk", func() url.Values { v := base(); v.Set("erk", "r"); return v }(), "erk requires epk"},
		{"tn and srt", func() url.Values { v := base(); v.Set("srt", "o"); return v }(), "mixes"},
		{"neither", func() url.Values { v := base(); v.Del("tn"); return v }(), "neither"},
		{"account without se", func() url.Values { v := acct(); v.Del("se"); return v }(), "needs ss, srt, sp and se"},
		{"account without srt", func() url.Values { v := acct(); v.Del("srt"); return v }(), "needs ss, srt, sp and se"},
		{"account bad ss", func() url.Values { v := acct(); v.Set("ss", "tz"); return v }(), "allowed letters"},
		{"account bad srt", func() url.Values { v := acct(); v.Set("srt", "x"); return v }(), "allowed letters"},
		{"account bad sp", func() url.Values { v := acct(); v.Set("sp", "rz"); return v }(), "allowed letters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseSAS(tc.q)
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("want error containing %q, got %v", tc.reason, err)
			}
			// Through Authenticate the same problem is an authentication failure.
			_, err = authAt(sasNow).Authenticate(sasRequest("/devstoreaccount1/t1()", tc.q))
			if !errors.Is(err, ErrAuthenticationFailed) {
				t.Fatalf("Authenticate: %v", err)
			}
		})
	}
	for _, q := range []url.Values{base(), acct()} {
		if _, err := parseSAS(q); err != nil {
			t.Fatalf("base query rejected: %v", err)
		}
	}
}

type policyMap map[string]Policy

func (m policyMap) AccessPolicy(_, table, id string) (Policy, bool, error) {
	if id == "broken" {
		return Policy{}, false, errors.New("store unavailable")
	}
	p, ok := m[strings.ToLower(table)+"/"+id]
	return p, ok, nil
}

func TestStoredAccessPolicy(t *testing.T) {
	policies := policyMap{
		"mytable/full":    {Start: sasStart, Expiry: sasEnd, Permission: "ra"},
		"mytable/noperm":  {Expiry: sasEnd},
		"mytable/noexp":   {Permission: "r"},
		"mytable/expired": {Expiry: sasStart, Permission: "r"},
		"mytable/badperm": {Expiry: sasEnd, Permission: "rw"},
	}
	tests := []struct {
		name     string
		sas      ServiceSAS
		policies PolicyLookup
		wantErr  error
		reason   string
		perms    string
	}{
		{name: "all from policy", sas: ServiceSAS{Identifier: "full"}, perms: "ra"},
		{name: "permissions from SAS", sas: ServiceSAS{Identifier: "noperm", Permissions: "d"}, perms: "d"},
		{name: "expiry from SAS", sas: ServiceSAS{Identifier: "noexp", Expiry: sasEnd}, perms: "r"},
		{name: "policy expired", sas: ServiceSAS{Identifier: "expired"}, wantErr: ErrAuthenticationFailed, reason: "expired"},
		{name: "field in both", sas: ServiceSAS{Identifier: "full", Permissions: "r"}, wantErr: ErrAuthenticationFailed, reason: "both"},
		{name: "expiry in both", sas: ServiceSAS{Identifier: "full", Expiry: sasEnd}, wantErr: ErrAuthenticationFailed, reason: "both"},
		{name: "no expiry anywhere", sas: ServiceSAS{Identifier: "noexp", Permissions: ""}, wantErr: ErrAuthenticationFailed, reason: "no expiry"},
		{name: "no permissions anywhere", sas: ServiceSAS{Identifier: "noperm"}, wantErr: ErrAuthenticationFailed, reason: "no permissions"},
		{name: "unknown identifier", sas: ServiceSAS{Identifier: "nope"}, wantErr: ErrAuthenticationFailed, reason: "cannot be found"},
		{name: "bad policy permission", sas: ServiceSAS{Identifier: "badperm"}, wantErr: ErrAuthenticationFailed, reason: "allowed letters"},
		{name: "no lookup configured", sas: ServiceSAS{Identifier: "full"}, policies: nil, wantErr: ErrAuthenticationFailed, reason: "has none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := tc.policies
			if tc.name != "no lookup configured" {
				pl = policies
			}
			a := NewAuthenticator(DevAccount(), Options{Now: func() time.Time { return sasNow }, Policies: pl})
			tc.sas.Table = "MyTable"
			v, err := tc.sas.Encode(DevAccount())
			if err != nil {
				t.Fatal(err)
			}
			p, err := a.Authenticate(sasRequest("/devstoreaccount1/mytable()", v))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("want %v containing %q, got %v", tc.wantErr, tc.reason, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.permissions != tc.perms {
				t.Fatalf("permissions %q, want %q", p.permissions, tc.perms)
			}
		})
	}
	t.Run("lookup error is not an auth failure", func(t *testing.T) {
		a := NewAuthenticator(DevAccount(), Options{Now: func() time.Time { return sasNow }, Policies: policies})
		v := serviceSAS(t, ServiceSAS{Identifier: "broken"})
		_, err := a.Authenticate(sasRequest("/devstoreaccount1/mytable()", v))
		if err == nil || errors.Is(err, ErrAuthenticationFailed) {
			t.Fatalf("got %v", err)
		}
		if _, ok := ErrorCode(err); ok {
			t.Fatal("lookup failure must not map to a 403 code")
		}
	})
}

func TestSASEncodeErrors(t *testing.T) {
	if _, err := (ServiceSAS{Permissions: "r", Expiry: sasEnd}).Encode(DevAccount()); err == nil {
		t.Fatal("service SAS without table must fail")
	}
	if _, err := (ServiceSAS{Table: "t", Expiry: sasEnd}).Encode(DevAccount()); err == nil {
		t.Fatal("service SAS without permissions must fail")
	}
	if _, err := (ServiceSAS{Table: "t", Permissions: "rw", Expiry: sasEnd}).Encode(DevAccount()); err == nil {
		t.Fatal("service SAS with w must fail")
	}
	if _, err := (ServiceSAS{Table: "t", Permissions: "r", Expiry: sasEnd}).Encode(Account{}); err == nil {
		t.Fatal("empty account must fail")
	}
	if _, err := (AccountSAS{Services: "t", ResourceTypes: "o", Permissions: "r"}).Encode(DevAccount()); err == nil {
		t.Fatal("account SAS without expiry must fail")
	}
	if _, err := (AccountSAS{Services: "t", ResourceTypes: "o", Permissions: "r", Expiry: sasEnd}).Encode(Account{}); err == nil {
		t.Fatal("empty account must fail")
	}
}
