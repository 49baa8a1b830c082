package frontend

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

func TestParseServiceProperties(t *testing.T) {
	doc := func(inner string) string { return "<StorageServiceProperties>" + inner + "</StorageServiceProperties>" }
	logging := "<Logging><Version>1.0</Version><Read>true</Read><Write>false</Write><Delete>true</Delete><RetentionPolicy><Enabled>true</Enabled><Days>3</Days></RetentionPolicy></Logging>"
	rule := func(inner string) string { return "<Cors><CorsRule>" + inner + "</CorsRule></Cors>" }
	tests := []struct {
		name string
		body string
		want string // substring of the canonical document
		bad  bool
	}{
		{name: "empty document keeps everything", body: doc(""), want: "<HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs>"},
		{name: "logging", body: doc(logging), want: "<Read>true</Read><Write>false</Write><Delete>true</Delete><RetentionPolicy><Enabled>true</Enabled><Days>3</Days></RetentionPolicy>"},
		{name: "disabled metrics drop IncludeAPIs", body: doc("<HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled><Days>9</Days></RetentionPolicy></HourMetrics>"),
			want: "<HourMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics>"},
		{name: "cors rule", body: doc(rule("<AllowedOrigins>http://a.example, http://b.example</AllowedOrigins><AllowedMethods>GET,PUT</AllowedMethods><AllowedHeaders></AllowedHeaders><ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>0</MaxAgeInSeconds>")),
			want: "<CorsRule><AllowedMethods>GET,PUT</AllowedMethods><AllowedOrigins>http://a.example, http://b.example</AllowedOrigins><AllowedHeaders /><ExposedHeaders>x-ms-*</ExposedHeaders><MaxAgeInSeconds>0</MaxAgeInSeconds></CorsRule>"},
		{name: "retention 366", body: doc("<MinuteMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>366</Days></RetentionPolicy></MinuteMetrics>"), bad: true},
		{name: "retention 0", body: doc("<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>true</Enabled><Days>0</Days></RetentionPolicy></MinuteMetrics>"), bad: true},
		{name: "retention without days", body: doc("<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>true</Enabled></RetentionPolicy></MinuteMetrics>"), bad: true},
		{name: "enabled metrics without IncludeAPIs", body: doc("<HourMetrics><Version>1.0</Version><Enabled>true</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></HourMetrics>"), bad: true},
		{name: "logging without version", body: doc(strings.Replace(logging, "<Version>1.0</Version>", "", 1)), bad: true},
		{name: "logging version 2.0", body: doc(strings.Replace(logging, "1.0", "2.0", 1)), bad: true},
		{name: "logging without Read", body: doc(strings.Replace(logging, "<Read>true</Read>", "", 1)), bad: true},
		{name: "not a boolean", body: doc(strings.Replace(logging, "<Read>true</Read>", "<Read>yes</Read>", 1)), bad: true},
		{name: "six cors rules", body: doc("<Cors>" + strings.Repeat("<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds></CorsRule>", 6) + "</Cors>"), bad: true},
		{name: "cors bad method", body: doc(rule("<AllowedOrigins>*</AllowedOrigins><AllowedMethods>TRACE</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds>")), bad: true},
		{name: "cors without origins", body: doc(rule("<AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds>")), bad: true},
		{name: "cors negative max age", body: doc(rule("<AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>-1</MaxAgeInSeconds>")), bad: true},
		{name: "cors three prefixed headers", body: doc(rule("<AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders>a*,b*,c*</AllowedHeaders><MaxAgeInSeconds>1</MaxAgeInSeconds>")), bad: true},
		{name: "cors long origin", body: doc(rule("<AllowedOrigins>http://" + strings.Repeat("a", 256) + "</AllowedOrigins><AllowedMethods>GET</AllowedMethods><MaxAgeInSeconds>1</MaxAgeInSeconds>")), bad: true},
		{name: "wrong root", body: "<ServiceProperties/>", bad: true},
		{name: "empty body", body: "", bad: true},
		{name: "malformed", body: "<StorageServiceProperties><Logging>", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parseServiceProperties([]byte(tc.body), nil)
			if tc.bad {
				var ae *apiError
				if !errors.As(err, &ae) || ae.code != "InvalidXmlDocument" {
					t.Fatalf("got %v, want InvalidXmlDocument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := string(appendServiceProperties(nil, p))
			if !strings.Contains(got, tc.want) {
				t.Fatalf("document %s\nlacks %s", got, tc.want)
			}
			// The canonical form parses back to itself.
			again, err := parseServiceProperties([]byte(got), nil)
			if err != nil || string(appendServiceProperties(nil, again)) != got {
				t.Fatalf("canonical form does not round-trip: %v", err)
			}
		})
	}
}

func TestExposedHeaders(t *testing.T) {
	h := http.Header{"Etag": {"x"}, "X-Ms-Request-Id": {"y"}, "X-Ms-Meta-A": {"z"}, "Content-Type": {"j"}, "Access-Control-Allow-Origin": {"*"}}
	tests := []struct {
		rules []string
		want  string
	}{
		{nil, ""},
		{[]string{"x-ms-meta-*"}, "X-Ms-Meta-A"},
		{[]string{"etag", "x-custom"}, "Etag,x-custom"},
		{[]string{"*"}, "Content-Type,Date,Etag,X-Ms-Meta-A,X-Ms-Request-Id"},
	}
	for _, tc := range tests {
		if got := exposedHeaders(h, tc.rules); got != tc.want {
			t.Errorf("exposedHeaders(%v) = %q, want %q", tc.rules, got, tc.want)
		}
	}
}

// TestSDKServiceProperties sets and reads properties and stats with the SDK.
func TestSDKServiceProperties(t *testing.T) {
	ctx := context.Background()
	svc, endpoint, cred, opts := newSDKClientParts(t)
	got, err := svc.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !*got.HourMetrics.Enabled || *got.Logging.Read || len(got.Cors) != 0 {
		t.Fatalf("defaults %+v", got.ServiceProperties)
	}
	_, err = svc.SetProperties(ctx, aztables.ServiceProperties{
		Logging: &aztables.Logging{Version: to.Ptr("1.0"), Read: to.Ptr(true), Write: to.Ptr(true), Delete: to.Ptr(false),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr(int32(5))}},
		Cors: []*aztables.CorsRule{{AllowedOrigins: to.Ptr("www.xyz.com"), AllowedMethods: to.Ptr("PUT"), AllowedHeaders: to.Ptr("x-ms-meta-data*"),
			ExposedHeaders: to.Ptr("x-ms-meta-source*"), MaxAgeInSeconds: to.Ptr(int32(500))}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err = svc.GetProperties(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !*got.Logging.Read || *got.Logging.Delete || *got.Logging.RetentionPolicy.Days != 5 || !*got.HourMetrics.Enabled ||
		len(got.Cors) != 1 || *got.Cors[0].AllowedOrigins != "www.xyz.com" || *got.Cors[0].MaxAgeInSeconds != 500 {
		t.Fatalf("after set: %+v", got.ServiceProperties)
	}
	_, err = svc.SetProperties(ctx, aztables.ServiceProperties{MinuteMetrics: &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(true),
		RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr(int32(366))}}}, nil)
	if st, code := respCode(err); st != http.StatusBadRequest || code != "InvalidXmlDocument" {
		t.Fatalf("retention 366: %d %s (%v)", st, code, err)
	}
	_, err = svc.GetStatistics(ctx, nil)
	if st, code := respCode(err); st != http.StatusBadRequest || code != "InvalidQueryParameterValue" {
		t.Fatalf("stats on the primary: %d %s (%v)", st, code, err)
	}
	secondary, err := aztables.NewServiceClientWithSharedKey(endpoint+"-secondary", cred, opts)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := secondary.GetStatistics(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *stats.GeoReplication.Status != aztables.GeoReplicationStatusLive || stats.GeoReplication.LastSyncTime == nil {
		t.Fatalf("stats %+v", stats.GeoReplication)
	}
}

// TestCORSHeadersOnHotPath checks that requests without CORS rules or an
// Origin get no CORS headers and no wrapped writer.
func TestCORSHeadersOnHotPath(t *testing.T) {
	s, _ := newTestServer(t)
	r := signedRequest(t, "GET", "/devstoreaccount1/people(PartitionKey='Smith',RowKey='Ben')", "")
	rec := httptest.NewRecorder()
	if w := s.corsWriter(rec, &reqCtx{r: r, account: "devstoreaccount1"}); w != http.ResponseWriter(rec) {
		t.Fatal("writer wrapped without CORS rules")
	}
	s.Handler().ServeHTTP(rec, r)
	for k := range rec.Header() {
		if strings.HasPrefix(k, "Access-Control") || k == "Vary" {
			t.Fatalf("CORS header %s without rules", k)
		}
	}
}
