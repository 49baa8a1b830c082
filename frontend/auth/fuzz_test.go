package auth

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Seeds beyond testdata/fuzz/<Name>/ live here so they stay valid if the
// dev key or formats change.
func FuzzParseAuthorization(f *testing.F) {
	f.Add("SharedKeyLite devstoreaccount1:" + kaLite)
	f.Add("SharedKey devstoreaccount1:" + kaFull)
	f.Add("SharedKey :")
	f.Add("SharedKey a:b:c")
	f.Add("Bearer x")
	f.Fuzz(func(t *testing.T, header string) {
		h, err := parseAuthorization(header)
		if err != nil {
			return
		}
		_, rest, _ := strings.Cut(strings.TrimSpace(header), " ")
		_, sig, _ := strings.Cut(strings.TrimSpace(rest), ":")
		mac, err := base64.StdEncoding.DecodeString(sig)
		if h.account == "" || err != nil || !bytes.Equal(mac, h.signature[:]) || (h.scheme != SchemeSharedKey && h.scheme != SchemeSharedKeyLite) {
			t.Fatalf("accepted malformed header %q as %+v", header, h)
		}
		// The full path must not panic either, whatever the header says.
		r := httptest.NewRequest(http.MethodGet, "http://h/devstoreaccount1/t1", nil)
		r.Header.Set("Authorization", header)
		r.Header.Set("x-ms-date", testDate)
		if p, err := authAt(testDateTime).Authenticate(r); err == nil && p.Kind() != PrincipalSharedKey {
			t.Fatalf("kind %v", p.Kind())
		}
	})
}

func FuzzParseSAS(f *testing.F) {
	f.Add("sv=2019-02-02&tn=mytable&sp=raud&st=2006-01-02T00%3A00%3A00Z&se=2006-01-03T00%3A00%3A00Z&spr=https%2Chttp&spk=a&epk=z&sig="+url.QueryEscape(kaServiceSAS), "127.0.0.1:1")
	f.Add("sv=2019-02-02&ss=t&srt=sco&sp=rwdlacu&st=2006-01-02T00%3A00%3A00Z&se=2006-01-03T00%3A00%3A00Z&spr=https%2Chttp&sig="+url.QueryEscape(kaAccountSAS), "[::1]:2")
	f.Add("sv=2021-06-08&ss=t&srt=o&sp=r&se=2006-01-03&ses=x&sip=127.0.0.1-127.0.0.9&sig=AAAA", "127.0.0.5:3")
	f.Add("tn=t&si=pol&sv=2019-02-02&srk=1&sig=%zz", "x")
	f.Fuzz(func(t *testing.T, rawQuery, remoteAddr string) {
		q, _ := url.ParseQuery(rawQuery)
		tok, err := parseSAS(q)
		if err != nil {
			return
		}
		if tok.kind != sasService && tok.kind != sasAccount {
			t.Fatalf("kind %v", tok.kind)
		}
		// Re-sign the token so Authenticate gets past the signature and
		// exercises windows, sip, spr, stored policies and Authorize.
		q.Set("sig", DevAccount().sign(tok.stringToSign(DevAccountName)))
		r := httptest.NewRequest(http.MethodGet, "http://h/devstoreaccount1/t1", nil)
		r.URL.RawQuery = q.Encode()
		r.RemoteAddr = remoteAddr
		a := NewAuthenticator(DevAccount(), Options{
			Now:      func() time.Time { return sasNow },
			Policies: policyMap{strings.ToLower(tok.table) + "/pol": {Expiry: sasEnd, Permission: "r"}},
		})
		p, err := a.Authenticate(r)
		if err != nil {
			if _, ok := ErrorCode(err); !ok {
				t.Fatalf("error without an Azure code: %v", err)
			}
			return
		}
		for _, k := range allKinds {
			err := p.Authorize(Access{Kind: k, Table: tok.table, PartitionKey: tok.spk, RowKey: tok.erk})
			if _, ok := ErrorCode(err); err != nil && !ok {
				t.Fatalf("Authorize error without an Azure code: %v", err)
			}
		}
		if kr, ok := p.KeyRange(); ok {
			_ = kr.Contains(tok.epk, tok.srk)
		}
	})
}
