package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const testDate = "Mon, 02 Jan 2006 15:04:05 GMT"

var testDateTime = time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC)

// refSign is the test's own HMAC-SHA256 over a hand-written string-to-sign,
// independent of the package's string builders.
func refSign(t *testing.T, stringToSign string) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(DevAccountKey)
	if err != nil {
		t.Fatal(err)
	}
	h := hmac.New(sha256.New, key)
	h.Write([]byte(stringToSign))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

func authAt(now time.Time) *Authenticator {
	return NewAuthenticator(DevAccount(), Options{Now: func() time.Time { return now }})
}

func TestParseAuthorization(t *testing.T) {
	mac := make([]byte, 32)
	for i := range mac {
		mac[i] = byte(7*i + 1)
	}
	goodSig := base64.StdEncoding.EncodeToString(mac)
	tests := []struct {
		name, header   string
		scheme, acct   string
		wantErr        bool
		errNoAuthValue bool
	}{
		{name: "lite", header: "SharedKeyLite devstoreaccount1:" + goodSig, scheme: "SharedKeyLite", acct: "devstoreaccount1"},
		{name: "full", header: "SharedKey devstoreaccount1:" + goodSig, scheme: "SharedKey", acct: "devstoreaccount1"},
		{name: "extra spaces", header: "  SharedKey   acct:" + goodSig + "  ", scheme: "SharedKey", acct: "acct"},
		{name: "empty", header: "", wantErr: true, errNoAuthValue: true},
		{name: "bearer", header: "Bearer abc", wantErr: true},
		{name: "lowercase scheme", header: "sharedkey acct:" + goodSig, wantErr: true},
		{name: "scheme only", header: "SharedKey", wantErr: true},
		{name: "no colon", header: "SharedKey acct" + goodSig, wantErr: true},
		{name: "empty account", header: "SharedKey :" + goodSig, wantErr: true},
		{name: "empty signature", header: "SharedKey acct:", wantErr: true},
		{name: "not base64", header: "SharedKey acct:!!!!", wantErr: true},
		{name: "short mac", header: "SharedKey acct:" + base64.StdEncoding.EncodeToString([]byte("short")), wantErr: true},
		{name: "33-byte mac", header: "SharedKey acct:" + base64.StdEncoding.EncodeToString(make([]byte, 33)), wantErr: true},
		{name: "48-byte mac", header: "SharedKey acct:" + base64.StdEncoding.EncodeToString(make([]byte, 48)), wantErr: true},
		{name: "long mac", header: "SharedKey acct:" + base64.StdEncoding.EncodeToString(make([]byte, 200)), wantErr: true},
		{name: "mac without padding", header: "SharedKey acct:" + strings.TrimRight(goodSig, "="), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAuthorization(tc.header)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("want error, got %+v", got)
				}
				if errors.Is(err, errNoAuthorization) != tc.errNoAuthValue {
					t.Fatalf("errNoAuthorization = %v, want %v (%v)", !tc.errNoAuthValue, tc.errNoAuthValue, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, sig, _ := strings.Cut(tc.header, ":")
			mac, err := base64.StdEncoding.DecodeString(strings.TrimSpace(sig))
			if got.scheme != tc.scheme || got.account != tc.acct || err != nil || !bytes.Equal(mac, got.signature[:]) {
				t.Fatalf("got %+v", got)
			}
		})
	}
}

// Signatures below were computed outside Go with
// openssl dgst -sha256 -mac HMAC -macopt hexkey:<decoded dev key> -binary | base64
// over the string-to-sign shown next to each.
const (
	// "Mon, 02 Jan 2006 15:04:05 GMT\n/devstoreaccount1/devstoreaccount1/mytable(PartitionKey='p%20k%27%271',RowKey='r%C3%BC')"
	kaLite = "u4uQRdQIJYUmntGgrmrRuo7WiVSqJtnsr6J+ZDhHJ+E="
	// "DELETE\n\napplication/json\nMon, 02 Jan 2006 15:04:05 GMT\n/devstoreaccount1/devstoreaccount1/Tables('mytable')"
	kaFull = "mDuyDGjtoU5Xtj2LoYPvoE3pxGg7FinSU+8DJGIZdus="
)

func TestSharedKeyKnownAnswers(t *testing.T) {
	a := authAt(testDateTime.Add(time.Minute))
	t.Run("lite", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:10002/devstoreaccount1/mytable(PartitionKey='p%20k%27%271',RowKey='r%C3%BC')", nil)
		r.Header.Set("x-ms-date", testDate)
		r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+kaLite)
		p, err := a.Authenticate(r)
		if err != nil {
			t.Fatal(err)
		}
		if p.Kind() != PrincipalSharedKey || p.Scheme() != SchemeSharedKeyLite || p.Account() != DevAccountName {
			t.Fatalf("principal %+v", p)
		}
	})
	t.Run("full", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodDelete, "http://127.0.0.1:10002/devstoreaccount1/Tables('mytable')", nil)
		r.Header.Set("x-ms-date", testDate)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "SharedKey devstoreaccount1:"+kaFull)
		if _, err := a.Authenticate(r); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reference implementation agrees", func(t *testing.T) {
		if got := refSign(t, "Mon, 02 Jan 2006 15:04:05 GMT\n/devstoreaccount1/devstoreaccount1/mytable(PartitionKey='p%20k%27%271',RowKey='r%C3%BC')"); got != kaLite {
			t.Fatalf("refSign = %s, want %s", got, kaLite)
		}
	})
}

// TestSharedKeyPathForms signs the string-to-sign a variety of clients
// produce and checks each is accepted for the same request.
func TestSharedKeyPathForms(t *testing.T) {
	a := authAt(testDateTime)
	const target = "/devstoreaccount1/my%20table(PartitionKey='a%27%27b',RowKey='%C3%A9')"
	tests := []struct {
		name, canonical string
		ok              bool
	}{
		{"path-style, account twice, escaped", "/devstoreaccount1/devstoreaccount1/my%20table(PartitionKey='a%27%27b',RowKey='%C3%A9')", true},
		{"account once (leading segment removed)", "/devstoreaccount1/my%20table(PartitionKey='a%27%27b',RowKey='%C3%A9')", true},
		{"unescaped path", "/devstoreaccount1/devstoreaccount1/my table(PartitionKey='a''b',RowKey='é')", true},
		{"unescaped, account once", "/devstoreaccount1/my table(PartitionKey='a''b',RowKey='é')", true},
		{"Go re-escaped path", "/devstoreaccount1/devstoreaccount1/my%20table%28PartitionKey=%27a%27%27b%27,RowKey=%27%C3%A9%27%29", true},
		{"other table", "/devstoreaccount1/devstoreaccount1/other", false},
		{"other key", "/devstoreaccount1/devstoreaccount1/my%20table(PartitionKey='a%27%27c',RowKey='%C3%A9')", false},
		{"account missing entirely", "/my%20table(PartitionKey='a%27%27b',RowKey='%C3%A9')", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:10002"+target, nil)
			r.Header.Set("x-ms-date", testDate)
			r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+refSign(t, testDate+"\n"+tc.canonical))
			_, err := a.Authenticate(r)
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok && !errors.Is(err, ErrAuthenticationFailed) {
				t.Fatalf("want ErrAuthenticationFailed, got %v", err)
			}
		})
	}
}

func TestSharedKeyCanonicalizedResource(t *testing.T) {
	a := authAt(testDateTime)
	tests := []struct {
		name, method, url, canonical string
	}{
		{"comp=acl", http.MethodGet, "http://h/devstoreaccount1/mytable?comp=acl&timeout=5", "/devstoreaccount1/devstoreaccount1/mytable?comp=acl"},
		{"service properties path-style", http.MethodGet, "http://h/devstoreaccount1?restype=service&comp=properties", "/devstoreaccount1/devstoreaccount1?comp=properties"},
		{"service properties, account not signed", http.MethodGet, "http://h/devstoreaccount1?restype=service&comp=properties", "/devstoreaccount1/?comp=properties"},
		{"host-style root", http.MethodGet, "http://h/?restype=service&comp=stats", "/devstoreaccount1/?comp=stats"},
		{"query params other than comp ignored", http.MethodGet, "http://h/devstoreaccount1/Tables?$top=1&NextTableName=x", "/devstoreaccount1/devstoreaccount1/Tables"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.url, nil)
			r.Header.Set("x-ms-date", testDate)
			r.Header.Set("Authorization", "SharedKey devstoreaccount1:"+refSign(t, tc.method+"\n\n\n"+testDate+"\n"+tc.canonical))
			if _, err := a.Authenticate(r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSharedKeyFailures(t *testing.T) {
	const url = "http://h/devstoreaccount1/Tables"
	good := func(t *testing.T) *http.Request {
		r := httptest.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
		r.Header.Set("x-ms-date", testDate)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "SharedKey devstoreaccount1:"+refSign(t, "POST\n\napplication/json\n"+testDate+"\n/devstoreaccount1/devstoreaccount1/Tables"))
		return r
	}
	tests := []struct {
		name   string
		mutate func(t *testing.T, r *http.Request)
		now    time.Time
		reason string // substring of the error
	}{
		{name: "baseline ok", mutate: func(*testing.T, *http.Request) {}},
		{name: "no auth", mutate: func(_ *testing.T, r *http.Request) { r.Header.Del("Authorization") }, reason: "anonymous"},
		{name: "two auth headers", mutate: func(_ *testing.T, r *http.Request) { r.Header.Add("Authorization", r.Header.Get("Authorization")) }, reason: "more than one"},
		{name: "unknown account", mutate: func(t *testing.T, r *http.Request) {
			r.Header.Set("Authorization", "SharedKey someoneelse:"+refSign(t, "x"))
		}, reason: "names account \"someoneelse\""},
		{name: "bad signature", mutate: func(t *testing.T, r *http.Request) {
			r.Header.Set("Authorization", "SharedKey devstoreaccount1:"+refSign(t, "something else"))
		}, reason: "does not match"},
		{name: "content type changed", mutate: func(_ *testing.T, r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, reason: "does not match"},
		{name: "verb changed", mutate: func(_ *testing.T, r *http.Request) { r.Method = http.MethodPut }, reason: "does not match"},
		{name: "missing date", mutate: func(_ *testing.T, r *http.Request) { r.Header.Del("x-ms-date") }, reason: "neither x-ms-date nor Date"},
		{name: "unparseable date", mutate: func(_ *testing.T, r *http.Request) { r.Header.Set("x-ms-date", "yesterday") }, reason: "not an RFC 1123"},
		{name: "date too old", now: testDateTime.Add(15*time.Minute + time.Second), mutate: func(*testing.T, *http.Request) {}, reason: "clock skew"},
		{name: "date too new", now: testDateTime.Add(-15*time.Minute - time.Second), mutate: func(*testing.T, *http.Request) {}, reason: "clock skew"},
		{name: "date at skew edge", now: testDateTime.Add(15 * time.Minute), mutate: func(*testing.T, *http.Request) {}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = testDateTime
			}
			r := good(t)
			tc.mutate(t, r)
			_, err := authAt(now).Authenticate(r)
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrAuthenticationFailed) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("want ErrAuthenticationFailed containing %q, got %v", tc.reason, err)
			}
			if code, _ := ErrorCode(err); code != "AuthenticationFailed" {
				t.Fatalf("code %q", code)
			}
		})
	}
}

func TestSharedKeyDateHeaders(t *testing.T) {
	const other = "Mon, 02 Jan 2006 15:05:05 GMT"
	const stale = "Mon, 02 Jan 2006 14:00:00 GMT"
	tests := []struct {
		name, xmsDate, date, signed string
		ok                          bool
	}{
		{name: "Date only", date: testDate, signed: testDate, ok: true},
		{name: "x-ms-date only", xmsDate: testDate, signed: testDate, ok: true},
		{name: "both, x-ms-date signed (documented)", xmsDate: other, date: testDate, signed: other, ok: true},
		{name: "both, Date signed (Azurite)", xmsDate: other, date: testDate, signed: testDate, ok: true},
		{name: "both, signed Date is stale", xmsDate: testDate, date: stale, signed: stale},
		{name: "signed a date not sent", xmsDate: testDate, signed: other},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "http://h/devstoreaccount1/Tables", nil)
			if tc.xmsDate != "" {
				r.Header.Set("x-ms-date", tc.xmsDate)
			}
			if tc.date != "" {
				r.Header.Set("Date", tc.date)
			}
			r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+refSign(t, tc.signed+"\n/devstoreaccount1/devstoreaccount1/Tables"))
			_, err := authAt(testDateTime).Authenticate(r)
			if tc.ok != (err == nil) {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}
			if err != nil && !errors.Is(err, ErrAuthenticationFailed) {
				t.Fatal(err)
			}
		})
	}
}

func TestClockSkewOption(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://h/devstoreaccount1/Tables", nil)
	if err := SignSharedKeyLite(r, DevAccount()); err != nil {
		t.Fatal(err)
	}
	date, _ := http.ParseTime(r.Header.Get("x-ms-date"))
	a := NewAuthenticator(DevAccount(), Options{ClockSkew: time.Minute, Now: func() time.Time { return date.Add(2 * time.Minute) }})
	if _, err := a.Authenticate(r); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("want skew failure, got %v", err)
	}
	a = NewAuthenticator(DevAccount(), Options{ClockSkew: 5 * time.Minute, Now: func() time.Time { return date.Add(2 * time.Minute) }})
	if _, err := a.Authenticate(r); err != nil {
		t.Fatal(err)
	}
}

func TestSignRoundTrip(t *testing.T) {
	a := NewAuthenticator(DevAccount(), Options{})
	for _, tc := range []struct {
		name string
		sign func(*http.Request, Account) error
	}{{"SharedKeyLite", SignSharedKeyLite}, {"SharedKey", SignSharedKey}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, u := range []string{
				"http://127.0.0.1:10002/devstoreaccount1/Tables",
				"http://127.0.0.1:10002/devstoreaccount1/t1(PartitionKey='%C3%BC%20x',RowKey='y%27%27z')",
				"http://127.0.0.1:10002/devstoreaccount1/t1?comp=acl",
				"http://127.0.0.1:10002/devstoreaccount1?restype=service&comp=properties",
			} {
				r, err := http.NewRequest(http.MethodPut, u, nil)
				if err != nil {
					t.Fatal(err)
				}
				r.Header.Set("Content-Type", "application/xml")
				if err := tc.sign(r, DevAccount()); err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(r.Header.Get("Authorization"), tc.name+" devstoreaccount1:") {
					t.Fatalf("header %q", r.Header.Get("Authorization"))
				}
				// What the server sees is the request line, not the client's URL struct.
				srv := httptest.NewRequest(r.Method, u, nil)
				srv.Header = r.Header.Clone()
				if _, err := a.Authenticate(srv); err != nil {
					t.Fatalf("%s: %v", u, err)
				}
			}
		})
	}
	t.Run("empty account", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "http://h/", nil)
		if err := SignSharedKey(r, Account{}); err == nil {
			t.Fatal("want error")
		}
	})
}

func TestAccountHelpers(t *testing.T) {
	if _, err := NewAccount("a", "not base64!"); err == nil {
		t.Fatal("want decode error")
	}
	if _, err := NewAccount("", DevAccountKey); err == nil {
		t.Fatal("want empty-name error")
	}
	acct := DevAccount()
	if acct.Name != DevAccountName || len(acct.Key) != 64 {
		t.Fatalf("%+v", acct)
	}
	r := httptest.NewRequest(http.MethodGet, "http://h/devstoreaccount1/Tables", nil)
	r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+refSign(t, "x"))
	if _, err := NewAuthenticator(Account{Name: "x"}, Options{}).Authenticate(r); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("keyless authenticator must refuse, got %v", err)
	}
}

// TestSharedKeyOneAuthenticator: the dates parsed last are remembered; one
// Authenticator answering requests of different dates, a stale one
// between two good ones, an unparseable one, and both header flavours,
// answers each as a fresh one does.
func TestSharedKeyOneAuthenticator(t *testing.T) {
	const stale = "Mon, 02 Jan 2006 14:00:00 GMT"
	const other = "Mon, 02 Jan 2006 15:05:05 GMT"
	a := authAt(testDateTime)
	for i, tc := range []struct {
		date, signed string
		sharedKey    bool
		ok           bool
	}{
		{date: testDate, signed: testDate, ok: true},
		{date: stale, signed: stale},
		{date: testDate, signed: testDate, sharedKey: true, ok: true},
		{date: "not a date", signed: "not a date"},
		{date: other, signed: other, ok: true},
		{date: other, signed: testDate},
		{date: stale, signed: stale, sharedKey: true},
		{date: testDate, signed: testDate, ok: true},
	} {
		r := httptest.NewRequest(http.MethodGet, "http://h/devstoreaccount1/Tables", nil)
		r.Header.Set("x-ms-date", tc.date)
		auth := "SharedKeyLite devstoreaccount1:" + refSign(t, tc.signed+"\n/devstoreaccount1/devstoreaccount1/Tables")
		if tc.sharedKey {
			auth = "SharedKey devstoreaccount1:" + refSign(t, "GET\n\n\n"+tc.signed+"\n/devstoreaccount1/devstoreaccount1/Tables")
		}
		r.Header.Set("Authorization", auth)
		_, err := a.Authenticate(r)
		_, fresh := authAt(testDateTime).Authenticate(r)
		if tc.ok != (err == nil) || (err == nil) != (fresh == nil) {
			t.Fatalf("request %d: ok=%v, err=%v, a fresh authenticator's err=%v", i, tc.ok, err, fresh)
		}
	}
}

// TestSharedKeyAllocations bounds what verifying a point read's SharedKey
// signature allocates: the signature decoded from the header and the
// Principal (the string to sign is built in a pooled buffer, the dates are
// not collected in a slice, a repeated date is not parsed again).
func TestSharedKeyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:10002/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')", nil)
	if err := SignSharedKeyLite(r, DevAccount()); err != nil {
		t.Fatal(err)
	}
	a := NewAuthenticator(DevAccount(), Options{})
	if _, err := a.AuthenticateAccount(r, "devstoreaccount1"); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() {
		if _, err := a.AuthenticateAccount(r, "devstoreaccount1"); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Fatalf("a SharedKeyLite check allocates %.0f times, want none", n)
	}
}

// TestSharedKeyPrincipals: the principals shared by all requests name the
// account and the scheme each request was signed with, for every account
// served.
func TestSharedKeyPrincipals(t *testing.T) {
	other := Account{Name: "other", Key: []byte("another key of 32 bytes, or so..")}
	a := NewAuthenticator(DevAccount(), Options{Accounts: []Account{other}})
	for _, acct := range []Account{DevAccount(), other} {
		for _, scheme := range []string{SchemeSharedKey, SchemeSharedKeyLite} {
			r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:10002/"+acct.Name+"/people()", nil)
			sign := SignSharedKeyLite
			if scheme == SchemeSharedKey {
				sign = SignSharedKey
			}
			if err := sign(r, acct); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				p, err := a.AuthenticateAccount(r, acct.Name)
				if err != nil {
					t.Fatalf("%s %s: %v", acct.Name, scheme, err)
				}
				if p.Kind() != PrincipalSharedKey || p.Account() != acct.Name || p.Scheme() != scheme {
					t.Fatalf("%s %s: principal %+v", acct.Name, scheme, p)
				}
			}
		}
	}
}

// TestSharedKeyPathFormsNameOneResource: a signature is accepted only for
// the resource it was made for. The unescaped spelling of a path holding
// '%' in a key is the escaped spelling of another entity's path
// (PartitionKey "a%2541" unescapes to what a client sends for "a%41"), so
// a signature captured from one request would open the other entity
// (with SharedKeyLite, for any method).
func TestSharedKeyPathFormsNameOneResource(t *testing.T) {
	a := authAt(testDateTime)
	tests := []struct {
		name, target, signed string
		ok                   bool
	}{
		{"the escaped path as sent", "/devstoreaccount1/t(PartitionKey='a%252541',RowKey='r')",
			"/devstoreaccount1/devstoreaccount1/t(PartitionKey='a%252541',RowKey='r')", true},
		{"another entity's escaped path (the unescaped spelling of this one)", "/devstoreaccount1/t(PartitionKey='a%252541',RowKey='r')",
			"/devstoreaccount1/devstoreaccount1/t(PartitionKey='a%2541',RowKey='r')", false},
		{"another entity's, account once", "/devstoreaccount1/t(PartitionKey='a%252541',RowKey='r')",
			"/devstoreaccount1/t(PartitionKey='a%2541',RowKey='r')", false},
		{"unescaped spelling without '%' still accepted", "/devstoreaccount1/t(PartitionKey='a%20b',RowKey='r')",
			"/devstoreaccount1/devstoreaccount1/t(PartitionKey='a b',RowKey='r')", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodDelete} {
				r := httptest.NewRequest(method, "http://127.0.0.1:10002"+tc.target, nil)
				r.Header.Set("x-ms-date", testDate)
				r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+refSign(t, testDate+"\n"+tc.signed))
				_, err := a.Authenticate(r)
				if tc.ok && err != nil {
					t.Fatalf("%s: %v", method, err)
				}
				if !tc.ok && !errors.Is(err, ErrAuthenticationFailed) {
					t.Fatalf("%s: want ErrAuthenticationFailed, got %v", method, err)
				}
			}
		})
	}
}

// TestSharedKeyAccountOnceNotTheRoot: with path-style URLs the Go SDK
// signs the account twice, so the service root's signature reads
// "/devstoreaccount1/devstoreaccount1?comp=properties". That is also the
// account-once spelling of a table named like the account with the same
// comp; a captured signature of Get Service Properties must not query (or,
// with SharedKeyLite, insert into) that table.
func TestSharedKeyAccountOnceNotTheRoot(t *testing.T) {
	a := authAt(testDateTime)
	tests := []struct {
		name, target, signed string
		ok                   bool
	}{
		{"the root, as the Go SDK signs it", "/devstoreaccount1?restype=service&comp=properties",
			"/devstoreaccount1/devstoreaccount1?comp=properties", true},
		{"the root, account once", "/devstoreaccount1?restype=service&comp=properties",
			"/devstoreaccount1/?comp=properties", true},
		{"a table named like the account, as sent", "/devstoreaccount1/devstoreaccount1?comp=properties",
			"/devstoreaccount1/devstoreaccount1/devstoreaccount1?comp=properties", true},
		{"that table with the root's signature", "/devstoreaccount1/devstoreaccount1?comp=properties",
			"/devstoreaccount1/devstoreaccount1?comp=properties", false},
		{"that table on the secondary with the root's signature", "/devstoreaccount1-secondary/devstoreaccount1?comp=stats",
			"/devstoreaccount1/devstoreaccount1?comp=stats", false},
		{"other tables keep the account-once spelling", "/devstoreaccount1/mytable?comp=acl",
			"/devstoreaccount1/mytable?comp=acl", true},
		{"an entity of that table keeps it too", "/devstoreaccount1/devstoreaccount1(PartitionKey='p',RowKey='r')",
			"/devstoreaccount1/devstoreaccount1(PartitionKey='p',RowKey='r')", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				r := httptest.NewRequest(method, "http://127.0.0.1:10002"+tc.target, nil)
				r.Header.Set("x-ms-date", testDate)
				r.Header.Set("Authorization", "SharedKeyLite devstoreaccount1:"+refSign(t, testDate+"\n"+tc.signed))
				_, err := a.Authenticate(r)
				if tc.ok && err != nil {
					t.Fatalf("%s: %v", method, err)
				}
				if !tc.ok && !errors.Is(err, ErrAuthenticationFailed) {
					t.Fatalf("%s: want ErrAuthenticationFailed, got %v", method, err)
				}
			}
		})
	}
}

// TestSharedKeyCompIsTheOneServed: the comp in the canonicalized resource
// must be the comp the front-end acts on. The front-end reads a ';' in the
// query as part of a value (an unescaped "$format=…;odata=…"), where
// url.ParseQuery drops the pair: "comp=x;&comp=acl" is comp "x;" there, a
// Query Entities, so a captured Get Table ACL signature ("?comp=acl") must
// not open it.
func TestSharedKeyCompIsTheOneServed(t *testing.T) {
	a := authAt(testDateTime)
	tests := []struct {
		name, target, signed string
		ok                   bool
	}{
		{"comp=acl", "/devstoreaccount1/mytable?comp=acl",
			"/devstoreaccount1/devstoreaccount1/mytable?comp=acl", true},
		{"an ACL signature on a query that names comp=acl second", "/devstoreaccount1/mytable?comp=x;&comp=acl",
			"/devstoreaccount1/devstoreaccount1/mytable?comp=acl", false},
		{"that request signed with the comp served", "/devstoreaccount1/mytable?comp=x;&comp=acl",
			"/devstoreaccount1/devstoreaccount1/mytable?comp=x;", true},
		{"a no-comp signature on comp with a ';'", "/devstoreaccount1/mytable?comp=acl;x",
			"/devstoreaccount1/devstoreaccount1/mytable", false},
		{"an unescaped $format keeps comp", "/devstoreaccount1/mytable?$format=application/json;odata=nometadata&comp=acl",
			"/devstoreaccount1/devstoreaccount1/mytable?comp=acl", true},
		{"an unescaped $format, no comp", "/devstoreaccount1/mytable?$format=application/json;odata=nometadata",
			"/devstoreaccount1/devstoreaccount1/mytable", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, scheme := range []string{SchemeSharedKeyLite, SchemeSharedKey} {
				r := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:10002"+tc.target, nil)
				r.Header.Set("x-ms-date", testDate)
				sts := testDate + "\n" + tc.signed
				if scheme == SchemeSharedKey {
					sts = "GET\n\n\n" + sts
				}
				r.Header.Set("Authorization", scheme+" devstoreaccount1:"+refSign(t, sts))
				_, err := a.Authenticate(r)
				if tc.ok && err != nil {
					t.Fatalf("%s: %v", scheme, err)
				}
				if !tc.ok && !errors.Is(err, ErrAuthenticationFailed) {
					t.Fatalf("%s: want ErrAuthenticationFailed, got %v", scheme, err)
				}
			}
		})
	}
}
