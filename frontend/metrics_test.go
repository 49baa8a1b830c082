package frontend

import (
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// gathered returns the value of a counter, or the sample count of a
// histogram, of the default registry's series name{labels} (0 if absent).
func gathered(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			l := m.GetLabel()
			if len(l) != len(labels) {
				continue
			}
			for i := range l { // label pairs come sorted by name, as the labels are declared
				if l[i].GetValue() != labels[i] {
					continue series
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestInstrumentCounts: every request lands once in requests_total under
// its method (unknown methods as "other") and status code, and once in
// request_seconds under its method, through the cached series.
func TestInstrumentCounts(t *testing.T) {
	s, _ := newTestServer(t)
	tests := []struct {
		method, target, body, label string
		code                        int
	}{
		{"POST", "/devstoreaccount1/people", `{"PartitionKey":"m","RowKey":"1"}`, "POST", 201},
		{"POST", "/devstoreaccount1/people", `{"PartitionKey":"m","RowKey":"1"}`, "POST", 409},
		{"POST", "/devstoreaccount1/people", `{"PartitionKey":"m","RowKey":"2"}`, "POST", 201},
		{"GET", "/devstoreaccount1/people(PartitionKey='m',RowKey='1')", "", "GET", 200},
		{"BREW", "/devstoreaccount1/people", "", "other", 405},
	}
	for _, tc := range tests {
		code := strconv.Itoa(tc.code)
		before := gathered(t, "tablestore_frontend_requests_total", code, tc.label)
		beforeSamples := gathered(t, "tablestore_frontend_request_seconds", tc.label)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, signedRequest(t, tc.method, tc.target, tc.body))
		if rec.Code != tc.code {
			t.Fatalf("%s %s: status %d, want %d: %s", tc.method, tc.target, rec.Code, tc.code, rec.Body.String())
		}
		if got := gathered(t, "tablestore_frontend_requests_total", code, tc.label); got != before+1 {
			t.Errorf("%s %s: requests_total{%s,%s} %v, want %v", tc.method, tc.target, tc.label, code, got, before+1)
		}
		if got := gathered(t, "tablestore_frontend_request_seconds", tc.label); got != beforeSamples+1 {
			t.Errorf("%s %s: request_seconds{%s} has %v samples, want %v", tc.method, tc.target, tc.label, got, beforeSamples+1)
		}
	}
}
