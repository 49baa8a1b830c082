package conformance

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// defaultProperties is a new account's document; tests that change the
// (cluster-wide) properties put it back.
const defaultProperties = "<StorageServiceProperties><Logging><Version>1.0</Version><Read>false</Read><Write>false</Write><Delete>false</Delete><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></Logging>" +
	"<HourMetrics><Version>1.0</Version><Enabled>true</Enabled><IncludeAPIs>true</IncludeAPIs><RetentionPolicy><Enabled>true</Enabled><Days>7</Days></RetentionPolicy></HourMetrics>" +
	"<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled><RetentionPolicy><Enabled>false</Enabled></RetentionPolicy></MinuteMetrics><Cors /></StorageServiceProperties>"

func resetProperties(t *testing.T) {
	t.Helper()
	r := raw(t, "PUT", "/?restype=service&comp=properties", map[string]string{"Content-Type": "application/xml"}, []byte(defaultProperties), true)
	if r.status != http.StatusAccepted {
		t.Fatalf("resetting service properties: %d %s", r.status, r.body)
	}
}

func TestServiceProperties(t *testing.T) {
	ctx := context.Background()
	resetProperties(t)
	t.Cleanup(func() { resetProperties(t) })

	r := raw(t, "GET", "?restype=service&comp=properties", map[string]string{"Accept": "application/xml"}, nil, true)
	if r.status != 200 || r.header.Get("Content-Type") != "application/xml" ||
		string(r.body) != "\uFEFF<?xml version=\"1.0\" encoding=\"utf-8\"?>"+defaultProperties {
		t.Fatalf("defaults: %d %s", r.status, r.body)
	}
	tests := []struct {
		name  string
		props aztables.ServiceProperties
		check func(p aztables.ServiceProperties) bool
	}{
		{"logging", aztables.ServiceProperties{Logging: &aztables.Logging{Version: to.Ptr("1.0"), Read: to.Ptr(true), Write: to.Ptr(true), Delete: to.Ptr(true),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr(int32(5))}}},
			func(p aztables.ServiceProperties) bool {
				return *p.Logging.Read && *p.Logging.Delete && *p.Logging.RetentionPolicy.Days == 5 && *p.HourMetrics.Enabled
			}},
		{"hour metrics", aztables.ServiceProperties{HourMetrics: &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(false),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr(int32(2))}}},
			func(p aztables.ServiceProperties) bool {
				return !*p.HourMetrics.IncludeAPIs && *p.HourMetrics.RetentionPolicy.Days == 2 && *p.Logging.Read // logging kept
			}},
		{"minute metrics", aztables.ServiceProperties{MinuteMetrics: &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(true),
			RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr(int32(365))}}},
			func(p aztables.ServiceProperties) bool {
				return *p.MinuteMetrics.Enabled && *p.MinuteMetrics.RetentionPolicy.Days == 365
			}},
		{"cors", aztables.ServiceProperties{Cors: []*aztables.CorsRule{{AllowedOrigins: to.Ptr("www.xyz.com"), AllowedMethods: to.Ptr("PUT"),
			AllowedHeaders: to.Ptr("x-ms-meta-data*"), ExposedHeaders: to.Ptr("x-ms-meta-source*"), MaxAgeInSeconds: to.Ptr(int32(500))}}},
			func(p aztables.ServiceProperties) bool {
				return len(p.Cors) == 1 && *p.Cors[0].AllowedMethods == "PUT" && *p.Cors[0].ExposedHeaders == "x-ms-meta-source*" && *p.Cors[0].MaxAgeInSeconds == 500
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := svc.SetProperties(ctx, tt.props, nil); err != nil {
				t.Fatal(err)
			}
			got, err := svc.GetProperties(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(got.ServiceProperties) {
				t.Fatalf("properties %+v", got.ServiceProperties)
			}
		})
	}
	t.Run("SetAnswers202", func(t *testing.T) {
		r := raw(t, "PUT", "/?restype=service&comp=properties", map[string]string{"Content-Type": "application/xml"}, []byte("<StorageServiceProperties/>"), true)
		if r.status != http.StatusAccepted || len(r.body) != 0 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	})
	t.Run("Invalid", func(t *testing.T) {
		var six []*aztables.CorsRule
		for range 6 {
			six = append(six, &aztables.CorsRule{AllowedOrigins: to.Ptr("*"), AllowedMethods: to.Ptr("GET"), AllowedHeaders: to.Ptr(""), ExposedHeaders: to.Ptr(""), MaxAgeInSeconds: to.Ptr(int32(1))})
		}
		bad := []aztables.ServiceProperties{
			{MinuteMetrics: &aztables.Metrics{Version: to.Ptr("1.0"), Enabled: to.Ptr(true), IncludeAPIs: to.Ptr(true), RetentionPolicy: &aztables.RetentionPolicy{Enabled: to.Ptr(true), Days: to.Ptr(int32(366))}}},
			{Cors: []*aztables.CorsRule{{AllowedOrigins: to.Ptr("*"), AllowedMethods: to.Ptr("FETCH"), MaxAgeInSeconds: to.Ptr(int32(1))}}},
			{Cors: six},
		}
		for i, p := range bad {
			_, err := svc.SetProperties(ctx, p, nil)
			if st, code := respCode(err); st != 400 || code != "InvalidXmlDocument" {
				t.Fatalf("document %d: %d %s (%v)", i, st, code, err)
			}
		}
		r := raw(t, "PUT", "/?restype=service&comp=properties", map[string]string{"Content-Type": "application/xml"}, []byte("<StorageServiceProperties><Logging>"), true)
		if r.status != 400 || !strings.Contains(string(r.body), `<m:error xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"><m:code>InvalidXmlDocument</m:code><m:message xml:lang="en-US">XML specified is not syntactically valid.`) {
			t.Fatalf("malformed XML: %d %s", r.status, r.body)
		}
	})
	t.Run("Stats", func(t *testing.T) {
		sec, err := aztables.NewServiceClientWithSharedKey(endpoint+"-secondary", cred, clientOptions())
		if err != nil {
			t.Fatal(err)
		}
		st, err := sec.GetStatistics(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if *st.GeoReplication.Status != aztables.GeoReplicationStatusLive || time.Since(*st.GeoReplication.LastSyncTime) > time.Minute {
			t.Fatalf("stats %s %v", *st.GeoReplication.Status, st.GeoReplication.LastSyncTime)
		}
		r := raw(t, "GET", "?restype=service&comp=nope", nil, nil, true)
		if r.status != 400 || !strings.Contains(string(r.body), "<m:code>InvalidQueryParameterValue</m:code>") {
			t.Fatalf("unknown comp: %d %s", r.status, r.body)
		}
	})
}

func TestCORS(t *testing.T) {
	resetProperties(t)
	t.Cleanup(func() { resetProperties(t) })
	table, c := newTable(t, "cors")
	if _, err := c.AddEntity(context.Background(), []byte(`{"PartitionKey":"p","RowKey":"r"}`), nil); err != nil {
		t.Fatal(err)
	}
	preflight := func(origin, method, headers string) rawResponse {
		h := map[string]string{}
		if origin != "" {
			h["Origin"] = origin
		}
		if method != "" {
			h["Access-Control-Request-Method"] = method
		}
		if headers != "" {
			h["Access-Control-Request-Headers"] = headers
		}
		return raw(t, "OPTIONS", "/"+table+"()", h, nil, false)
	}
	if r := preflight("http://app.example", "GET", ""); r.status != 403 || r.code() != "CorsPreflightFailure" {
		t.Fatalf("preflight without rules: %d %s", r.status, r.code())
	}
	rules := `<StorageServiceProperties><Cors>` +
		`<CorsRule><AllowedOrigins>http://app.example</AllowedOrigins><AllowedMethods>GET,PUT,MERGE,DELETE,POST</AllowedMethods><AllowedHeaders>x-ms-*,content-type,accept</AllowedHeaders><ExposedHeaders>x-ms-request-id,etag</ExposedHeaders><MaxAgeInSeconds>60</MaxAgeInSeconds></CorsRule>` +
		`<CorsRule><AllowedOrigins>*</AllowedOrigins><AllowedMethods>GET</AllowedMethods><AllowedHeaders></AllowedHeaders><ExposedHeaders>*</ExposedHeaders><MaxAgeInSeconds>5</MaxAgeInSeconds></CorsRule>` +
		`</Cors></StorageServiceProperties>`
	if r := raw(t, "PUT", "/?restype=service&comp=properties", map[string]string{"Content-Type": "application/xml"}, []byte(rules), true); r.status != 202 {
		t.Fatalf("set rules: %d %s", r.status, r.body)
	}

	t.Run("Preflight", func(t *testing.T) {
		tests := []struct {
			name, origin, method, headers string
			status                        int
			want                          map[string]string
		}{
			{"exact origin", "http://app.example", "MERGE", "x-ms-version,content-type", 200, map[string]string{
				"Access-Control-Allow-Origin": "http://app.example", "Access-Control-Allow-Methods": "MERGE",
				"Access-Control-Allow-Headers": "x-ms-version,content-type", "Access-Control-Max-Age": "60", "Access-Control-Allow-Credentials": "true"}},
			{"origin case-insensitive", "HTTP://APP.EXAMPLE", "PUT", "", 200, map[string]string{"Access-Control-Max-Age": "60"}},
			{"any origin, GET only", "http://else.example", "GET", "", 200, map[string]string{"Access-Control-Allow-Origin": "http://else.example", "Access-Control-Max-Age": "5"}},
			{"method not allowed", "http://else.example", "DELETE", "", 403, nil},
			{"header not allowed", "http://app.example", "PUT", "authorization-x", 403, nil},
			{"no Origin", "", "GET", "", 400, nil},
			{"no method", "http://app.example", "", "", 400, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				r := preflight(tt.origin, tt.method, tt.headers)
				if r.status != tt.status {
					t.Fatalf("%d %s", r.status, r.body)
				}
				for k, v := range tt.want {
					if r.header.Get(k) != v {
						t.Errorf("%s = %q, want %q", k, r.header.Get(k), v)
					}
				}
				switch tt.status {
				case 403:
					if r.code() != "CorsPreflightFailure" {
						t.Errorf("code %s", r.code())
					}
				case 400:
					if r.code() != "InvalidHeaderValue" {
						t.Errorf("code %s", r.code())
					}
				}
			})
		}
	})

	t.Run("ActualRequests", func(t *testing.T) {
		path := entityPath(table, "p", "r")
		r := raw(t, "GET", path, jsonHeaders("Origin", "http://app.example"), nil, true)
		if r.status != 200 || r.header.Get("Access-Control-Allow-Origin") != "http://app.example" || r.header.Get("Access-Control-Allow-Credentials") != "true" ||
			r.header.Get("Vary") != "Origin" || r.header.Get("Access-Control-Expose-Headers") != "Etag,X-Ms-Request-Id" {
			t.Fatalf("matched origin: %v", r.header)
		}
		r = raw(t, "GET", path, jsonHeaders("Origin", "http://else.example"), nil, true)
		if r.header.Get("Access-Control-Allow-Origin") != "*" || r.header.Get("Vary") != "" || !strings.Contains(r.header.Get("Access-Control-Expose-Headers"), "X-Ms-Version") {
			t.Fatalf("wildcard rule: %v", r.header)
		}
		r = raw(t, "DELETE", path, jsonHeaders("Origin", "http://else.example", "If-Match", "*"), nil, true)
		if r.status != 204 || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("method not covered: %d %v", r.status, r.header)
		}
		r = raw(t, "GET", path, jsonHeaders(), nil, true)
		if r.status != 404 || r.header.Get("Vary") != "Origin" || r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("no Origin: %d %v", r.status, r.header)
		}
		// Errors carry the CORS headers too, so browsers can read them.
		r = raw(t, "GET", path, jsonHeaders("Origin", "http://app.example"), nil, true)
		if r.status != 404 || r.header.Get("Access-Control-Allow-Origin") != "http://app.example" {
			t.Fatalf("error response: %d %v", r.status, r.header)
		}
	})
}
