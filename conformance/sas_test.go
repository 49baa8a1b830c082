package conformance

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"tablestore/frontend/auth"
)

func TestTableACL(t *testing.T) {
	ctx := context.Background()
	table, c := newTable(t, "acl")
	start := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	expiry := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	policy := func(id string) *aztables.SignedIdentifier {
		return &aztables.SignedIdentifier{ID: to.Ptr(id), AccessPolicy: &aztables.AccessPolicy{Start: &start, Expiry: &expiry, Permission: to.Ptr("r")}}
	}

	got, err := c.GetAccessPolicy(ctx, nil)
	if err != nil || len(got.SignedIdentifiers) != 0 {
		t.Fatalf("new table ACL: %+v %v", got.SignedIdentifiers, err)
	}
	acl := []*aztables.SignedIdentifier{policy("1"), policy("2"), policy("3"), policy("4"), {ID: to.Ptr("bare")}}
	if _, err := c.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: acl}); err != nil {
		t.Fatal(err)
	}
	got, err = c.GetAccessPolicy(ctx, nil)
	if err != nil || len(got.SignedIdentifiers) != 5 {
		t.Fatalf("after set: %+v %v", got.SignedIdentifiers, err)
	}
	p := got.SignedIdentifiers[0].AccessPolicy
	if *got.SignedIdentifiers[0].ID != "1" || !p.Start.Equal(start) || !p.Expiry.Equal(expiry) || *p.Permission != "r" || got.SignedIdentifiers[4].AccessPolicy != nil {
		t.Fatalf("policies %+v", got.SignedIdentifiers)
	}
	// The service's time format on the wire.
	r := raw(t, "GET", "/"+table+"?comp=acl", map[string]string{"Accept": "application/xml"}, nil, true)
	if r.status != 200 || r.header.Get("Content-Type") != "application/xml" ||
		!strings.HasPrefix(string(r.body), "\uFEFF<?xml version=\"1.0\" encoding=\"utf-8\"?><SignedIdentifiers><SignedIdentifier><Id>1</Id><AccessPolicy><Start>2020-01-01T00:00:00.0000000Z</Start><Expiry>2040-01-01T00:00:00.0000000Z</Expiry><Permission>r</Permission></AccessPolicy></SignedIdentifier>") {
		t.Fatalf("GET ACL: %d %s", r.status, r.body)
	}
	r = raw(t, "PUT", "/"+table+"?comp=acl", map[string]string{"Content-Type": "application/xml"}, []byte("<SignedIdentifiers><SignedIdentifier>"), true)
	if r.status != 400 || r.code() != "InvalidXmlDocument" || !strings.Contains(string(r.body), "<m:code>InvalidXmlDocument</m:code>") {
		t.Fatalf("bad XML: %d %s", r.status, r.body)
	}

	// The SDK refuses a sixth policy itself; the service's answer:
	six := "<SignedIdentifiers>" + strings.Repeat("<SignedIdentifier><Id>5</Id></SignedIdentifier>", 6) + "</SignedIdentifiers>"
	if r := raw(t, "PUT", "/"+table+"?comp=acl", map[string]string{"Content-Type": "application/xml"}, []byte(six), true); r.status != 400 || r.code() != "InvalidXmlDocument" {
		t.Fatalf("six policies: %d %s", r.status, r.code())
	}
	_, err = c.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{{AccessPolicy: &aztables.AccessPolicy{Expiry: &expiry}}}})
	wantCode(t, err, http.StatusBadRequest, "InvalidXmlDocument")
	if _, err := c.SetAccessPolicy(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got, _ = c.GetAccessPolicy(ctx, nil)
	if len(got.SignedIdentifiers) != 0 {
		t.Fatalf("after clearing: %+v", got.SignedIdentifiers)
	}
	_, err = svc.NewClient("nosuchacl").GetAccessPolicy(ctx, nil)
	wantCode(t, err, http.StatusNotFound, "TableNotFound")
}

// serviceSAS signs a table SAS with the SDK's helper (which, like the
// service, signs key ranges but, unlike it should, does not emit them).
func serviceSAS(t *testing.T, v aztables.SASSignatureValues) string {
	t.Helper()
	q, err := v.Sign(cred)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestServiceSAS(t *testing.T) {
	ctx := context.Background()
	table, c := newTable(t, "sas")
	other, _ := newTable(t, "sasother")
	for _, k := range [][2]string{{"a", "1"}, {"b", "1"}, {"b", "5"}, {"c", "1"}, {"d", "1"}} {
		if _, err := c.AddEntity(ctx, mustJSON(t, map[string]any{"PartitionKey": k[0], "RowKey": k[1]}), nil); err != nil {
			t.Fatal(err)
		}
	}
	hour := time.Now().Add(time.Hour).UTC()

	t.Run("Permissions", func(t *testing.T) {
		all := sasClient(t, table, serviceSAS(t, aztables.SASSignatureValues{TableName: table, Permissions: "raud", ExpiryTime: hour}))
		if _, err := all.AddEntity(ctx, []byte(`{"PartitionKey":"s","RowKey":"1"}`), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := all.UpsertEntity(ctx, []byte(`{"PartitionKey":"s","RowKey":"1","V":1}`), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := all.GetEntity(ctx, "s", "1", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := all.DeleteEntity(ctx, "s", "1", nil); err != nil {
			t.Fatal(err)
		}
		ro := sasClient(t, table, serviceSAS(t, aztables.SASSignatureValues{TableName: table, Permissions: "r", ExpiryTime: hour}))
		if got, _ := listAll(t, ro, nil); len(got) != 5 {
			t.Fatalf("read-only query: %d", len(got))
		}
		_, err := ro.AddEntity(ctx, []byte(`{"PartitionKey":"s","RowKey":"2"}`), nil)
		wantCode(t, err, http.StatusForbidden, "AuthorizationPermissionMismatch")
		// Upsert needs both a and u.
		add := sasClient(t, table, serviceSAS(t, aztables.SASSignatureValues{TableName: table, Permissions: "a", ExpiryTime: hour}))
		_, err = add.UpsertEntity(ctx, []byte(`{"PartitionKey":"s","RowKey":"2"}`), nil)
		wantCode(t, err, http.StatusForbidden, "AuthorizationPermissionMismatch")
		// Another table, table-level and service-level operations.
		wrong := sasClient(t, other, serviceSAS(t, aztables.SASSignatureValues{TableName: table, Permissions: "raud", ExpiryTime: hour}))
		_, err = wrong.GetEntity(ctx, "a", "1", nil)
		wantCode(t, err, http.StatusForbidden, "AuthorizationFailure")
		r := raw(t, "GET", "/Tables?"+serviceSAS(t, aztables.SASSignatureValues{TableName: table, Permissions: "raud", ExpiryTime: hour}), jsonHeaders(), nil, false)
		if r.status != 403 || r.code() != "AuthorizationFailure" {
			t.Fatalf("list tables with a service SAS: %d %s", r.status, r.code())
		}
	})

	t.Run("TimeIPProtocol", func(t *testing.T) {
		tests := []struct {
			name string
			v    aztables.SASSignatureValues
			code string
		}{
			{"expired", aztables.SASSignatureValues{TableName: table, Permissions: "r", ExpiryTime: time.Now().Add(-time.Minute)}, "AuthenticationFailed"},
			{"not yet valid", aztables.SASSignatureValues{TableName: table, Permissions: "r", StartTime: time.Now().Add(time.Hour), ExpiryTime: hour.Add(time.Hour)}, "AuthenticationFailed"},
			{"other IP", aztables.SASSignatureValues{TableName: table, Permissions: "r", ExpiryTime: hour, IPRange: aztables.IPRange{Start: []byte{10, 0, 0, 1}}}, "AuthorizationSourceIPMismatch"},
			{"https only", aztables.SASSignatureValues{TableName: table, Permissions: "r", ExpiryTime: hour, Protocol: aztables.SASProtocolHTTPS}, "AuthorizationProtocolMismatch"},
			{"SDK key range (signed, not sent)", aztables.SASSignatureValues{TableName: table, Permissions: "r", ExpiryTime: hour, StartPartitionKey: "b"}, "AuthenticationFailed"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := sasClient(t, table, serviceSAS(t, tt.v)).GetEntity(ctx, "a", "1", nil)
				wantCode(t, err, http.StatusForbidden, tt.code)
			})
		}
	})

	t.Run("KeyRange", func(t *testing.T) {
		v, err := auth.ServiceSAS{Table: table, Permissions: "raud", Expiry: hour, StartPartitionKey: "b", StartRowKey: "2", EndPartitionKey: "c"}.Encode(acct)
		if err != nil {
			t.Fatal(err)
		}
		kr := sasClient(t, table, v.Encode())
		got, _ := listAll(t, kr, nil)
		if !slices.Equal(keysOf(got), []string{"b/5", "c/1"}) {
			t.Fatalf("query clipped to the range: %v", keysOf(got))
		}
		got, _ = listAll(t, kr, &aztables.ListEntitiesOptions{Filter: to.Ptr("PartitionKey ge 'a'"), Top: to.Ptr(int32(1))})
		if !slices.Equal(keysOf(got), []string{"b/5", "c/1"}) {
			t.Fatalf("paged clipped query: %v", keysOf(got))
		}
		if _, err := kr.GetEntity(ctx, "b", "5", nil); err != nil {
			t.Fatal(err)
		}
		_, err = kr.GetEntity(ctx, "b", "1", nil)
		wantCode(t, err, http.StatusForbidden, "AuthorizationFailure")
		_, err = kr.AddEntity(ctx, []byte(`{"PartitionKey":"d","RowKey":"9"}`), nil)
		wantCode(t, err, http.StatusForbidden, "AuthorizationFailure")
		if _, err := kr.AddEntity(ctx, []byte(`{"PartitionKey":"c","RowKey":"9"}`), nil); err != nil {
			t.Fatal(err)
		}
		_, err = kr.DeleteEntity(ctx, "a", "1", nil)
		wantCode(t, err, http.StatusForbidden, "AuthorizationFailure")
		// In a transaction, the operation outside the range fails it.
		_, err = kr.SubmitTransaction(ctx, []aztables.TransactionAction{
			{ActionType: aztables.TransactionTypeAdd, Entity: []byte(`{"PartitionKey":"b","RowKey":"7"}`)},
			{ActionType: aztables.TransactionTypeAdd, Entity: []byte(`{"PartitionKey":"b","RowKey":"0"}`)},
		}, nil)
		if err == nil || !strings.Contains(err.Error(), "HTTP/1.1 403") || !strings.Contains(err.Error(), `"value":"1:`) {
			t.Fatalf("transaction crossing the SAS range: %v", err)
		}
		if _, err := c.GetEntity(ctx, "b", "7", nil); err == nil {
			t.Fatal("refused transaction wrote")
		}
	})

	t.Run("StoredPolicy", func(t *testing.T) {
		exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
		if _, err := c.SetAccessPolicy(ctx, &aztables.SetAccessPolicyOptions{TableACL: []*aztables.SignedIdentifier{
			{ID: to.Ptr("reader"), AccessPolicy: &aztables.AccessPolicy{Expiry: &exp, Permission: to.Ptr("r")}},
		}}); err != nil {
			t.Fatal(err)
		}
		pc := sasClient(t, table, serviceSAS(t, aztables.SASSignatureValues{TableName: table, Identifier: "reader"}))
		if _, err := pc.GetEntity(ctx, "a", "1", nil); err != nil {
			t.Fatalf("read with si: %v", err)
		}
		_, err := pc.AddEntity(ctx, []byte(`{"PartitionKey":"x","RowKey":"1"}`), nil)
		wantCode(t, err, http.StatusForbidden, "AuthorizationPermissionMismatch")
		_, err = sasClient(t, table, serviceSAS(t, aztables.SASSignatureValues{TableName: table, Identifier: "nobody"})).GetEntity(ctx, "a", "1", nil)
		wantCode(t, err, http.StatusForbidden, "AuthenticationFailed")
		// A field set in both the SAS and the policy is refused.
		_, err = sasClient(t, table, serviceSAS(t, aztables.SASSignatureValues{TableName: table, Identifier: "reader", Permissions: "r"})).GetEntity(ctx, "a", "1", nil)
		wantCode(t, err, http.StatusForbidden, "AuthenticationFailed")
		if _, err := c.SetAccessPolicy(ctx, nil); err != nil {
			t.Fatal(err)
		}
		_, err = pc.GetEntity(ctx, "a", "1", nil)
		wantCode(t, err, http.StatusForbidden, "AuthenticationFailed")
	})
}

func TestAccountSAS(t *testing.T) {
	ctx := context.Background()
	hour := time.Now().Add(time.Hour).UTC()
	account := func(t *testing.T, ss, srt, sp string) *aztables.ServiceClient {
		t.Helper()
		q, err := aztables.AccountSASSignatureValues{Protocol: aztables.SASProtocolHTTPSandHTTP, ExpiryTime: hour,
			Services: ss, ResourceTypes: srt, Permissions: sp}.Sign(cred)
		if err != nil {
			t.Fatal(err)
		}
		s, err := aztables.NewServiceClientWithNoCredential(endpoint+"?"+q.Encode(), clientOptions())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	full := account(t, "t", "sco", "rwdlacu")
	if _, err := full.CreateTable(ctx, "acctsas1", nil); err != nil {
		t.Fatal(err)
	}
	tbl := full.NewClient("acctsas1")
	if _, err := tbl.AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.GetEntity(ctx, "p", "r", nil); err != nil {
		t.Fatal(err)
	}
	pager := full.NewListTablesPager(&aztables.ListTablesOptions{Filter: to.Ptr("TableName eq 'acctsas1'")})
	if resp, err := pager.NextPage(ctx); err != nil || len(resp.Tables) != 1 {
		t.Fatalf("list tables: %v", err)
	}
	if _, err := full.GetProperties(ctx, nil); err != nil {
		t.Fatalf("service properties: %v", err)
	}

	tests := []struct {
		name        string
		ss, srt, sp string
		op          func(s *aztables.ServiceClient) error
		code        string
	}{
		{"object only cannot create tables", "t", "o", "rwdlacu", func(s *aztables.ServiceClient) error { _, err := s.CreateTable(ctx, "acctsas2", nil); return err }, "AuthorizationResourceTypeMismatch"},
		{"container only cannot touch entities", "t", "c", "rwdlacu", func(s *aztables.ServiceClient) error {
			_, err := s.NewClient("acctsas1").GetEntity(ctx, "p", "r", nil)
			return err
		}, "AuthorizationResourceTypeMismatch"},
		{"read only cannot add", "t", "sco", "r", func(s *aztables.ServiceClient) error {
			_, err := s.NewClient("acctsas1").AddEntity(ctx, []byte(`{"PartitionKey":"p","RowKey":"x"}`), nil)
			return err
		}, "AuthorizationPermissionMismatch"},
		{"no list permission", "t", "sco", "r", func(s *aztables.ServiceClient) error {
			_, err := s.NewListTablesPager(nil).NextPage(ctx)
			return err
		}, "AuthorizationPermissionMismatch"},
		{"blob service only", "b", "sco", "rwdlacu", func(s *aztables.ServiceClient) error {
			_, err := s.NewClient("acctsas1").GetEntity(ctx, "p", "r", nil)
			return err
		}, "AuthorizationServiceMismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, tt.op(account(t, tt.ss, tt.srt, tt.sp)), http.StatusForbidden, tt.code)
		})
	}

	// A raw request signed with a wrong key, and one with no credentials.
	wrong, _ := auth.NewAccount(auth.DevAccountName, "AAAA"+auth.DevAccountKey[4:])
	v, _ := auth.AccountSAS{Services: "t", ResourceTypes: "sco", Permissions: "r", Expiry: hour}.Encode(wrong)
	if r := raw(t, "GET", "/Tables?"+v.Encode(), jsonHeaders(), nil, false); r.status != 403 || r.code() != "AuthenticationFailed" {
		t.Fatalf("wrong key: %d %s", r.status, r.code())
	}
	if r := raw(t, "GET", "/Tables", jsonHeaders(), nil, false); r.status != 403 || r.code() != "AuthenticationFailed" {
		t.Fatalf("anonymous: %d %s", r.status, r.code())
	}
}

// TestSharedKeySchemes signs raw requests with both header schemes and
// checks the date window.
func TestSharedKeySchemes(t *testing.T) {
	table, c := newTable(t, "skey")
	if _, err := c.AddEntity(context.Background(), []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		sign   func(*http.Request, auth.Account) error
		date   time.Time
		status int
		code   string
	}{
		{"SharedKey", auth.SignSharedKey, time.Now(), 200, ""},
		{"SharedKeyLite", auth.SignSharedKeyLite, time.Now(), 200, ""},
		{"SharedKey 10 minutes old", auth.SignSharedKey, time.Now().Add(-10 * time.Minute), 200, ""},
		{"SharedKey 20 minutes old", auth.SignSharedKey, time.Now().Add(-20 * time.Minute), 403, "AuthenticationFailed"},
		{"SharedKeyLite 20 minutes ahead", auth.SignSharedKeyLite, time.Now().Add(20 * time.Minute), 403, "AuthenticationFailed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", endpoint+entityPath(table, "p", "r"), nil)
			r.Header.Set("Accept", "application/json;odata=nometadata")
			r.Header.Set("x-ms-version", "2019-02-02")
			r.Header.Set("x-ms-date", tt.date.UTC().Format(http.TimeFormat))
			if err := tt.sign(r, acct); err != nil {
				t.Fatal(err)
			}
			resp, err := checker.RoundTrip(r)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status || resp.Header.Get("x-ms-error-code") != tt.code {
				t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("x-ms-error-code"))
			}
		})
	}
}
