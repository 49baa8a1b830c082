package frontend

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTopNotAnInteger checks $top values that are not integers, on Query
// Entities and Query Tables. The service parses $top as WCF Data Services
// does (RequestQueryProcessor.ReadSkipOrTopArgument): an empty value is no
// $top at all, a value Int32.TryParse refuses is a query syntax error,
// "Incorrect format for $top argument '…'." Syntax errors in a query come
// back as 400 InvalidInput with WCF's message (CloudStub's service-run
// Query_WhenUsingAnInvalidFilter_ThrowsException: "Syntax error at position
// 23 in …"), the code of every other bad $top (CloudStub's
// Query_TakeCountLessThan0/GreaterThan1000: InvalidInput). It used to be
// InvalidQueryParameterValue, the storage front-end's code for its own
// parameters (timeout, comp).
func TestTopNotAnInteger(t *testing.T) {
	for _, path := range []string{"/devstoreaccount1/people()", "/devstoreaccount1/Tables"} {
		for _, top := range []string{"abc", "1.5", "0x10", "1e3"} {
			s, _ := newTestServer(t)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, signedRequest(t, "GET", path+"?$top="+top, ""))
			want := "Incorrect format for $top argument '" + top + "'."
			if rec.Code != http.StatusBadRequest || rec.Header().Get("x-ms-error-code") != "InvalidInput" || !strings.Contains(rec.Body.String(), `"value":"`+want) {
				t.Fatalf("%s $top=%s: %d %s %s", path, top, rec.Code, rec.Header().Get("x-ms-error-code"), rec.Body.String())
			}
		}
		// An empty $top is no $top.
		s, _ := newTestServer(t)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, signedRequest(t, "GET", path+"?$top=", ""))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s $top=: %d %s", path, rec.Code, rec.Body.String())
		}
	}
}
