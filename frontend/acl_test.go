package frontend

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/frontend/auth"
	pb "tablestore/proto/tablestorepb"
)

func TestParseSignedIdentifiers(t *testing.T) {
	si := func(inner string) string { return "<SignedIdentifiers>" + inner + "</SignedIdentifiers>" }
	tests := []struct {
		name string
		body string
		n    int
		want string // Start|Expiry|Permission|HasPolicy of the first identifier
		bad  bool
	}{
		{name: "empty body clears", body: "", n: 0},
		{name: "empty element", body: "<SignedIdentifiers />", n: 0},
		{name: "BOM and declaration", body: "\uFEFF<?xml version=\"1.0\" encoding=\"utf-8\"?>" + si("<SignedIdentifier><Id>a</Id></SignedIdentifier>"), n: 1, want: "|||false"},
		{name: "times normalised", body: si("<SignedIdentifier><Id>a</Id><AccessPolicy><Start>2020-01-01T00:00:00Z</Start><Expiry>2024-01-01T01:00:00.25+01:00</Expiry><Permission>ra</Permission></AccessPolicy></SignedIdentifier>"),
			n: 1, want: "2020-01-01T00:00:00.0000000Z|2024-01-01T00:00:00.2500000Z|ra|true"},
		{name: "date only", body: si("<SignedIdentifier><Id>a</Id><AccessPolicy><Expiry>2024-01-01</Expiry></AccessPolicy></SignedIdentifier>"), n: 1, want: "|2024-01-01T00:00:00.0000000Z||true"},
		{name: "five", body: si(strings.Repeat("<SignedIdentifier><Id>x</Id></SignedIdentifier>", 1) + "<SignedIdentifier><Id>2</Id></SignedIdentifier><SignedIdentifier><Id>3</Id></SignedIdentifier><SignedIdentifier><Id>4</Id></SignedIdentifier><SignedIdentifier><Id>5</Id></SignedIdentifier>"), n: 5, want: "|||false"},
		{name: "six", body: si(strings.Repeat("<SignedIdentifier><Id>5</Id></SignedIdentifier>", 6)), bad: true},
		{name: "no id", body: si("<SignedIdentifier><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier>"), bad: true},
		{name: "id of 64", body: si("<SignedIdentifier><Id>" + strings.Repeat("i", 64) + "</Id></SignedIdentifier>"), n: 1, want: "|||false"},
		{name: "id of 64 characters, 128 bytes", body: si("<SignedIdentifier><Id>" + strings.Repeat("é", 64) + "</Id></SignedIdentifier>"), n: 1, want: "|||false"},
		{name: "id too long", body: si("<SignedIdentifier><Id>" + strings.Repeat("i", 65) + "</Id></SignedIdentifier>"), bad: true},
		{name: "duplicate id", body: si("<SignedIdentifier><Id>a</Id></SignedIdentifier><SignedIdentifier><Id>a</Id></SignedIdentifier>"), bad: true},
		{name: "nanoseconds", body: si("<SignedIdentifier><Id>a</Id><AccessPolicy><Expiry>2042-01-01T01:01:01.000000001Z</Expiry></AccessPolicy></SignedIdentifier>"), bad: true},
		{name: "not a time", body: si("<SignedIdentifier><Id>a</Id><AccessPolicy><Start>tomorrow</Start></AccessPolicy></SignedIdentifier>"), bad: true},
		{name: "bad permission", body: si("<SignedIdentifier><Id>a</Id><AccessPolicy><Permission>rw</Permission></AccessPolicy></SignedIdentifier>"), bad: true},
		{name: "repeated permission", body: si("<SignedIdentifier><Id>a</Id><AccessPolicy><Permission>rr</Permission></AccessPolicy></SignedIdentifier>"), bad: true},
		{name: "wrong root", body: "<Identifiers/>", bad: true},
		{name: "truncated", body: "<SignedIdentifiers><SignedIdentifier>", bad: true},
		{name: "trailing element", body: "<SignedIdentifiers/><More/>", bad: true},
		{name: "not xml", body: `{"a":1}`, bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			acl, err := parseSignedIdentifiers([]byte(tc.body))
			if tc.bad {
				var ae *apiError
				if !errors.As(err, &ae) || ae.code != "InvalidXmlDocument" || ae.status != 400 {
					t.Fatalf("got %v, want InvalidXmlDocument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(acl) != tc.n {
				t.Fatalf("%d identifiers, want %d", len(acl), tc.n)
			}
			if tc.n > 0 {
				a := acl[0]
				got := a.Start + "|" + a.Expiry + "|" + a.Permission + "|" + map[bool]string{true: "true", false: "false"}[a.HasPolicy]
				if got != tc.want {
					t.Fatalf("got %s, want %s", got, tc.want)
				}
			}
		})
	}
}

// TestSDKAccessPolicy sets and reads policies with the SDK, then uses a
// service SAS naming one (si).
func TestSDKAccessPolicy(t *testing.T) {
	ctx := context.Background()
	svc, endpoint := newSDKClient(t)
	if _, err := svc.CreateTable(ctx, "acltable", nil); err != nil {
		t.Fatal(err)
	}
	c := svc.NewClient("acltable")
	if _, err := c.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r","V":1}`), nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	expiry := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	_, err := c.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{
		{ID: to.Ptr("readonly"), AccessPolicy: &aztables.AccessPolicy{Start: &start, Expiry: &expiry, Permission: to.Ptr("r")}},
		{ID: to.Ptr("bare")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.GetAccessPolicy(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.SignedIdentifiers) != 2 || *got.SignedIdentifiers[0].ID != "readonly" ||
		!got.SignedIdentifiers[0].AccessPolicy.Expiry.Equal(expiry) || *got.SignedIdentifiers[0].AccessPolicy.Permission != "r" ||
		got.SignedIdentifiers[1].AccessPolicy != nil {
		t.Fatalf("policies %+v", got.SignedIdentifiers)
	}

	// A SAS naming the policy reads but cannot write.
	v, err := auth.ServiceSAS{Table: "acltable", Identifier: "readonly"}.Encode(auth.DevAccount())
	if err != nil {
		t.Fatal(err)
	}
	sasClient, err := aztables.NewClientWithNoCredential(endpoint+"/acltable?"+v.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sasClient.GetEntity(ctx, "p", "r", nil); err != nil {
		t.Fatalf("read with si: %v", err)
	}
	_, err = sasClient.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"new"}`), nil)
	if st, code := respCode(err); st != http.StatusForbidden || code != "AuthorizationPermissionMismatch" {
		t.Fatalf("write with read-only si: %d %s", st, code)
	}
	v, _ = auth.ServiceSAS{Table: "acltable", Identifier: "nosuch"}.Encode(auth.DevAccount())
	bad, _ := aztables.NewClientWithNoCredential(endpoint+"/acltable?"+v.Encode(), nil)
	_, err = bad.GetEntity(ctx, "p", "r", nil)
	if st, code := respCode(err); st != http.StatusForbidden || code != "AuthenticationFailed" {
		t.Fatalf("unknown si: %d %s", st, code)
	}

	// Clearing.
	if _, err := c.SetAccessPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, err = c.GetAccessPolicy(ctx, nil)
	if err != nil || len(got.SignedIdentifiers) != 0 {
		t.Fatalf("after clearing: %+v %v", got.SignedIdentifiers, err)
	}
	_, err = sasClient.GetEntity(ctx, "p", "r", nil)
	if st, _ := respCode(err); st != http.StatusForbidden {
		t.Fatalf("si of a removed policy still works: %v", err)
	}
}

// TestStoredPolicyOfAnotherAccount: the primary account's tables are
// stored under their own names and every other account's under
// "<account>/<table>", so a SAS of the primary account whose tn reads
// "other/secret" named the other account's table to the policy lookup.
// Such a SAS authorizes nothing, but whether it authenticated told the
// primary account's owner which policies the other account's tables hold
// (and whether they are in force). A tn that is no table name names no
// policy: the answer is the one for an unknown si.
func TestStoredPolicyOfAnotherAccount(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Accounts = auth.DevAccountName + ":" + auth.DevAccountKey + ";other:b3RoZXJrZXk="
	fb := newFakeBackend()
	s, err := NewServer(cfg, fb, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seedFixture(t, fb)
	if _, err := fb.CreateTable(ctx, "other/secret"); err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(time.Hour).UTC().Format(aclTimeLayout)
	if err := fb.SetTableACL(ctx, "other/secret", []*pb.SignedIdentifier{{Id: "p1", HasPolicy: true, Expiry: far, Permission: "r"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, tn, si string }{
		{"the other account's policy", "other/secret", "p1"},
		{"an id it does not hold", "other/secret", "nosuch"},
		{"a table name that is no table name", "..", "p1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := auth.ServiceSAS{Table: tc.tn, Identifier: tc.si}.Encode(auth.DevAccount())
			if err != nil {
				t.Fatal(err)
			}
			for _, target := range []string{"/devstoreaccount1/people()", "/devstoreaccount1/secret()"} {
				r := httptest.NewRequest("GET", "http://127.0.0.1:10002"+target+"?"+v.Encode(), nil)
				rec := httptest.NewRecorder()
				s.Handler().ServeHTTP(rec, r)
				if rec.Code != http.StatusForbidden || rec.Header().Get("x-ms-error-code") != "AuthenticationFailed" {
					t.Fatalf("%s: %d %s, want 403 AuthenticationFailed", target, rec.Code, rec.Header().Get("x-ms-error-code"))
				}
			}
		})
	}
}

// staleMapBackend is a fake backend whose partition map has gone without
// a master's updates for stale.
type staleMapBackend struct {
	*fakeBackend
	stale time.Duration
}

func (b staleMapBackend) MapStaleFor() time.Duration { return b.stale }

// TestStoredPolicyNeedsAFreshMap: a stored access policy is read from the
// front-end's copy of the table's ACL, which a master keeps current. Azure
// lets a policy's change take up to 30 s to take effect; a front-end whose
// map has had no master's updates for longer cannot tell that a policy
// was not removed or cut short meanwhile, so a SAS resting on one is
// answered 503 ServerBusy (a retry may reach a front-end that can tell),
// not authorized by a policy perhaps revoked. A SAS without a stored
// policy is unaffected.
func TestStoredPolicyNeedsAFreshMap(t *testing.T) {
	far := time.Now().Add(time.Hour).UTC()
	for _, tc := range []struct {
		name   string
		stale  time.Duration
		si     bool
		status int
	}{
		{"policy, map current", 0, true, http.StatusOK},
		{"policy, map 20 s behind", 20 * time.Second, true, http.StatusOK},
		{"policy, map 31 s behind", 31 * time.Second, true, http.StatusServiceUnavailable},
		{"no policy, map 31 s behind", 31 * time.Second, false, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fb := newFakeBackend()
			seedFixture(t, fb)
			ctx := context.Background()
			if err := fb.SetTableACL(ctx, "people", []*pb.SignedIdentifier{{Id: "p1", HasPolicy: true, Expiry: far.Format(aclTimeLayout), Permission: "r"}}); err != nil {
				t.Fatal(err)
			}
			s, err := NewServer(DefaultConfig(), staleMapBackend{fb, tc.stale}, nil)
			if err != nil {
				t.Fatal(err)
			}
			sas := auth.ServiceSAS{Table: "people", Identifier: "p1"}
			if !tc.si {
				sas = auth.ServiceSAS{Table: "people", Permissions: "r", Expiry: far}
			}
			v, err := sas.Encode(auth.DevAccount())
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "http://127.0.0.1:10002/devstoreaccount1/people()?"+v.Encode(), nil)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, r)
			if rec.Code != tc.status {
				t.Fatalf("%d %s %s, want %d", rec.Code, rec.Header().Get("x-ms-error-code"), rec.Body.String(), tc.status)
			}
			if tc.status == http.StatusServiceUnavailable && rec.Header().Get("x-ms-error-code") != "ServerBusy" {
				t.Fatalf("error code %q, want ServerBusy", rec.Header().Get("x-ms-error-code"))
			}
		})
	}
}
