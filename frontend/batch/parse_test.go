package batch

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

const (
	testBoundary   = "batch_00000000-0000-0000-0000-000000000000"
	testChangeset  = "changeset_11111111-1111-1111-1111-111111111111"
	testContentTyp = "multipart/mixed; boundary=" + testBoundary
)

// goSDKBody is laid out the way aztables v1.4 writes a transaction: sorted
// sub-request headers, DataServiceVersion and X-Ms-Version with empty
// values (the SDK sets them under non-canonical keys and then reads them
// back with Get), an undoubled quote in a key, no If-Match on an update.
func goSDKBody() string {
	cs := "--" + testChangeset
	return "--" + testBoundary + "\r\n" +
		"Content-Type: multipart/mixed; boundary=" + testChangeset + "\r\n\r\n" +
		cs + "\r\nContent-Transfer-Encoding: binary\r\nContent-Type: application/http\r\n\r\n" +
		"POST http://127.0.0.1:10002/devstoreaccount1/tbl?%24format=application%2Fjson%3Bodata%3Dminimalmetadata HTTP/1.1\r\n" +
		"Accept: application/json;odata=minimalmetadata\r\nContent-Length: 44\r\nContent-Type: application/json\r\n" +
		"Dataserviceversion: \r\nPrefer: return-no-content\r\nX-Ms-Version: \r\n\r\n" +
		`{"PartitionKey":"p'1","RowKey":"1","V":1}` + "\r\n" +
		cs + "\r\nContent-Transfer-Encoding: binary\r\nContent-Type: application/http\r\n\r\n" +
		"PATCH http://127.0.0.1:10002/devstoreaccount1/tbl(PartitionKey='p%271',RowKey='2') HTTP/1.1\r\n" +
		"Accept: application/json\r\nContent-Type: application/json\r\nDataserviceversion: \r\nX-Ms-Version: \r\n\r\n" +
		`{"PartitionKey":"p'1","RowKey":"2"}` + "\r\n" +
		cs + "\r\nContent-Transfer-Encoding: binary\r\nContent-Type: application/http\r\n\r\n" +
		"DELETE http://127.0.0.1:10002/devstoreaccount1/tbl(PartitionKey='p%271',RowKey='3') HTTP/1.1\r\n" +
		"Accept: application/json;odata=minimalmetadata\r\nIf-Match: *\r\nX-Ms-Version: \r\n\r\n" +
		"\r\n" + cs + "--\r\n\r\n--" + testBoundary + "--\r\n"
}

// jsSDKBody follows the JavaScript SDK: lower-case headers, an extra blank
// line before each body and after the change set header.
func jsSDKBody() string {
	cs := "--" + testChangeset
	return "--" + testBoundary + "\r\ncontent-type: multipart/mixed; boundary=" + testChangeset + "\r\n\r\n\r\n" +
		cs + "\r\ncontent-type: application/http\r\ncontent-transfer-encoding: binary\r\n\r\n" +
		"POST https://acct.table.core.windows.net/tbl HTTP/1.1\r\ncontent-type: application/json;odata=nometadata\r\n" +
		"accept: application/json;odata=minimalmetadata\r\ndataserviceversion: 3.0\r\nprefer: return-no-content\r\n\r\n\r\n" +
		`{"PartitionKey":"b","RowKey":"1"}` + "\r\n" +
		cs + "\r\ncontent-type: application/http\r\ncontent-transfer-encoding: binary\r\n\r\n" +
		"DELETE https://acct.table.core.windows.net/tbl(PartitionKey='b',RowKey='2') HTTP/1.1\r\n" +
		"accept: application/json;odata=minimalmetadata\r\ndataserviceversion: 3.0\r\nif-match: *\r\n\r\n\r\n" +
		cs + "--\r\n--" + testBoundary + "--\r\n"
}

func TestParse(t *testing.T) {
	type want struct {
		methods []string
		targets []string
		bodies  []string
		changes bool
	}
	tests := []struct {
		name string
		ct   string
		body string
		want want
		err  error
	}{
		{
			name: "go sdk",
			ct:   testContentTyp,
			body: goSDKBody(),
			want: want{
				methods: []string{"POST", "PATCH", "DELETE"},
				targets: []string{
					"http://127.0.0.1:10002/devstoreaccount1/tbl?%24format=application%2Fjson%3Bodata%3Dminimalmetadata",
					"http://127.0.0.1:10002/devstoreaccount1/tbl(PartitionKey='p%271',RowKey='2')",
					"http://127.0.0.1:10002/devstoreaccount1/tbl(PartitionKey='p%271',RowKey='3')",
				},
				bodies:  []string{`{"PartitionKey":"p'1","RowKey":"1","V":1}`, `{"PartitionKey":"p'1","RowKey":"2"}`, ""},
				changes: true,
			},
		},
		{
			name: "js sdk",
			ct:   testContentTyp,
			body: jsSDKBody(),
			want: want{
				methods: []string{"POST", "DELETE"},
				targets: []string{"https://acct.table.core.windows.net/tbl", "https://acct.table.core.windows.net/tbl(PartitionKey='b',RowKey='2')"},
				bodies:  []string{`{"PartitionKey":"b","RowKey":"1"}`, ""},
				changes: true,
			},
		},
		{
			name: "bare LF line ends",
			ct:   testContentTyp,
			body: strings.ReplaceAll(goSDKBody(), "\r\n", "\n"),
			want: want{
				methods: []string{"POST", "PATCH", "DELETE"},
				bodies:  []string{`{"PartitionKey":"p'1","RowKey":"1","V":1}`, `{"PartitionKey":"p'1","RowKey":"2"}`, ""},
				changes: true,
			},
		},
		{
			name: "quoted boundary, preamble, padding, epilogue",
			ct:   `multipart/mixed; boundary="` + testBoundary + `"`,
			body: "preamble\r\n--" + testBoundary + " \t\r\nContent-Type: multipart/mixed; boundary=\"" + testChangeset + "\"\r\n\r\n" +
				"--" + testChangeset + "\r\nContent-Type: application/http\r\nContent-ID: 1\r\n\r\n" +
				"DELETE /devstoreaccount1/tbl(PartitionKey='a',RowKey='b') HTTP/1.1\r\nIf-Match: *\r\n\r\n" +
				"--" + testChangeset + "--  \r\n--" + testBoundary + "--\r\nepilogue",
			want: want{methods: []string{"DELETE"}, targets: []string{"/devstoreaccount1/tbl(PartitionKey='a',RowKey='b')"}, bodies: []string{""}, changes: true},
		},
		{
			name: "query batch",
			ct:   testContentTyp,
			body: "--" + testBoundary + "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
				"GET http://h/devstoreaccount1/tbl(PartitionKey='a',RowKey='b') HTTP/1.1\r\nAccept: application/json\r\n\r\n" +
				"\r\n--" + testBoundary + "--\r\n",
			want: want{methods: []string{"GET"}, targets: []string{"http://h/devstoreaccount1/tbl(PartitionKey='a',RowKey='b')"}, bodies: []string{""}},
		},
		{
			name: "request without blank line after headers",
			ct:   testContentTyp,
			body: "--" + testBoundary + "\r\nContent-Type: multipart/mixed; boundary=" + testChangeset + "\r\n\r\n" +
				"--" + testChangeset + "\r\nContent-Type: application/http\r\n\r\nDELETE /t(PartitionKey='a',RowKey='b') HTTP/1.1\r\nIf-Match: *\r\n" +
				"--" + testChangeset + "--\r\n--" + testBoundary + "--",
			want: want{methods: []string{"DELETE"}, bodies: []string{""}, changes: true},
		},
		{name: "json content type", ct: "application/json", body: goSDKBody(), err: ErrContentType},
		{name: "no boundary", ct: "multipart/mixed", body: goSDKBody(), err: ErrContentType},
		{name: "wrong boundary", ct: "multipart/mixed; boundary=other", body: goSDKBody(), err: ErrMalformed},
		{name: "no close delimiter", ct: testContentTyp, body: strings.TrimSuffix(goSDKBody(), "--"+testBoundary+"--\r\n"), err: ErrMalformed},
		{name: "empty body", ct: testContentTyp, body: "", err: ErrMalformed},
		{name: "no parts", ct: testContentTyp, body: "--" + testBoundary + "--\r\n", err: ErrEmpty},
		{
			name: "empty change set",
			ct:   testContentTyp,
			body: "--" + testBoundary + "\r\nContent-Type: multipart/mixed; boundary=" + testChangeset + "\r\n\r\n--" + testChangeset + "--\r\n--" + testBoundary + "--\r\n",
			err:  ErrEmpty,
		},
		{
			name: "two change sets",
			ct:   testContentTyp,
			body: strings.Replace(goSDKBody(), "--"+testBoundary+"--", "--"+testBoundary+"\r\nContent-Type: multipart/mixed; boundary=c2\r\n\r\n--c2\r\n--c2--\r\n--"+testBoundary+"--", 1),
			err:  ErrMultipleParts,
		},
		{
			name: "part not application/http",
			ct:   testContentTyp,
			body: strings.Replace(goSDKBody(), "Content-Type: application/http", "Content-Type: text/plain", 1),
			err:  ErrMalformed,
		},
		{
			name: "bad transfer encoding",
			ct:   testContentTyp,
			body: strings.Replace(goSDKBody(), "Content-Transfer-Encoding: binary", "Content-Transfer-Encoding: base64", 1),
			err:  ErrMalformed,
		},
		{
			name: "bad request line",
			ct:   testContentTyp,
			body: strings.Replace(goSDKBody(), " HTTP/1.1\r\n", "\r\n", 1),
			err:  ErrMalformed,
		},
		{
			name: "lower-case method",
			ct:   testContentTyp,
			body: strings.Replace(goSDKBody(), "POST http", "post http", 1),
			err:  ErrMalformed,
		},
		{
			name: "header line without colon",
			ct:   testContentTyp,
			body: strings.Replace(goSDKBody(), "Prefer: return-no-content", "Prefer return-no-content", 1),
			err:  ErrMalformed,
		},
		{
			name: "part headers not terminated",
			ct:   testContentTyp,
			body: "--" + testBoundary + "\r\nContent-Type: multipart/mixed; boundary=" + testChangeset + "\r\n--" + testBoundary + "--\r\n",
			err:  ErrMalformed,
		},
		{
			name: "101 operations",
			ct:   testContentTyp,
			body: string(AppendRequestBody(nil, testBoundary, testChangeset, deletes(101))),
			err:  ErrTooManyOperations,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Parse(tc.ct, []byte(tc.body))
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("got %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.Changeset != tc.want.changes {
				t.Errorf("Changeset = %v", b.Changeset)
			}
			if len(b.Requests) != len(tc.want.methods) {
				t.Fatalf("%d requests, want %d", len(b.Requests), len(tc.want.methods))
			}
			for i, r := range b.Requests {
				if r.Method != tc.want.methods[i] {
					t.Errorf("request %d method %q", i, r.Method)
				}
				if tc.want.targets != nil && r.Target != tc.want.targets[i] {
					t.Errorf("request %d target %q", i, r.Target)
				}
				if string(r.Body) != tc.want.bodies[i] {
					t.Errorf("request %d body %q, want %q", i, r.Body, tc.want.bodies[i])
				}
			}
		})
	}
}

func TestParseHeaders(t *testing.T) {
	b, err := Parse(testContentTyp, []byte(goSDKBody()))
	if err != nil {
		t.Fatal(err)
	}
	h := b.Requests[0].Header
	if v, ok := h["Dataserviceversion"]; !ok || len(v) != 1 || v[0] != "" {
		t.Errorf("empty DataServiceVersion header lost: %q", v)
	}
	if h.Get("Prefer") != "return-no-content" || h.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", h)
	}
	if b.Requests[2].Header.Get("If-Match") != "*" {
		t.Errorf("If-Match %q", b.Requests[2].Header.Get("If-Match"))
	}
	js, err := Parse(testContentTyp, []byte(jsSDKBody()))
	if err != nil {
		t.Fatal(err)
	}
	if js.Requests[1].Header.Get("If-Match") != "*" {
		t.Errorf("lower-case header not canonicalised: %v", js.Requests[1].Header)
	}
}

func TestRequestRoundTrip(t *testing.T) {
	reqs := []Request{
		{Method: "POST", Target: "http://h/a/t", Header: http.Header{"Prefer": {"return-no-content"}, "X-Ms-Version": {""}}, Body: []byte(`{"PartitionKey":"a","RowKey":"b"}`), ContentID: "1"},
		{Method: "DELETE", Target: "http://h/a/t(PartitionKey='a',RowKey='c')", Header: http.Header{"If-Match": {"*"}}, Body: []byte{}},
	}
	body := AppendRequestBody(nil, testBoundary, testChangeset, reqs)
	b, err := Parse(ContentType(testBoundary), body)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if fmt.Sprint(b.Requests) != fmt.Sprint(reqs) {
		t.Fatalf("round trip:\n got %v\nwant %v", b.Requests, reqs)
	}
}

func deletes(n int) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = Request{Method: "DELETE", Target: fmt.Sprintf("/a/t(PartitionKey='p',RowKey='%d')", i), Header: http.Header{"If-Match": {"*"}}}
	}
	return out
}
