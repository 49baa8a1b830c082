package batch

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const (
	respBoundary   = "batchresponse_377b7eed-988f-4b9f-9e0f-8a1d09b47f46"
	respChangeset  = "changesetresponse_349f1da0-6365-40f2-99ad-ea4fdf3be0ef"
	recordedError  = `{"odata.error":{"code":"EntityAlreadyExists","message":{"lang":"en-US","value":"2:The specified entity already exists.\nRequestId:123ec98d-d002-00a9-036c-4f34c3000000\nTime:2022-04-13T19:29:04.2712828Z"}}}`
	recordedDelete = "HTTP/1.1 204 No Content\r\nX-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nDataServiceVersion: 1.0;\r\n\r\n"
)

// TestAppendResponseMatchesService rebuilds, byte for byte, the failure
// response the service sent in the aztables recording TestBatchError
// (storage): one 409 sub-response whose message carries the failing
// operation's index.
func TestAppendResponseMatchesService(t *testing.T) {
	got := AppendResponse(nil, respBoundary, respChangeset, []Response{{
		Status: http.StatusConflict,
		Header: []Header{
			{"X-Content-Type-Options", "nosniff"},
			{"Cache-Control", "no-cache"},
			{"Preference-Applied", "return-no-content"},
			{"DataServiceVersion", "3.0;"},
			{"Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8"},
		},
		Body: []byte(recordedError),
	}})
	want := "--" + respBoundary + "\r\n" +
		"Content-Type: multipart/mixed; boundary=" + respChangeset + "\r\n\r\n" +
		"--" + respChangeset + "\r\n" +
		"Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" +
		"HTTP/1.1 409 Conflict\r\n" +
		"X-Content-Type-Options: nosniff\r\nCache-Control: no-cache\r\nPreference-Applied: return-no-content\r\n" +
		"DataServiceVersion: 3.0;\r\nContent-Type: application/json;odata=minimalmetadata;streaming=true;charset=utf-8\r\n\r\n" +
		recordedError + "\r\n" +
		"--" + respChangeset + "--\r\n" +
		"--" + respBoundary + "--\r\n"
	if string(got) != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}

	// The success shape of the JavaScript SDK recording of a delete batch.
	del := Response{Status: http.StatusNoContent, Header: []Header{{"X-Content-Type-Options", "nosniff"}, {"Cache-Control", "no-cache"}, {"DataServiceVersion", "1.0;"}}}
	got = AppendResponse(nil, respBoundary, respChangeset, []Response{del, del})
	part := "--" + respChangeset + "\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n" + recordedDelete + "\r\n"
	want = "--" + respBoundary + "\r\nContent-Type: multipart/mixed; boundary=" + respChangeset + "\r\n\r\n" + part + part +
		"--" + respChangeset + "--\r\n--" + respBoundary + "--\r\n"
	if string(got) != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

// TestResponseReadByGoSDKLogic reads responses the way aztables does: the
// boundary from the first body line, then mime/multipart and
// http.ReadResponse for each part.
func TestResponseReadByGoSDKLogic(t *testing.T) {
	tests := []struct {
		name string
		body []byte
		want []int
	}{
		{"success", AppendResponse(nil, respBoundary, respChangeset, []Response{
			{Status: 204, Header: []Header{{"ETag", `W/"datetime'2024-01-02T03%3A04%3A05.1234567Z'"`}}},
			{Status: 201, Header: []Header{{"Content-Type", "application/json"}}, Body: []byte(`{"a":1}`)},
		}), []int{204, 201}},
		{"failure", AppendResponse(nil, respBoundary, respChangeset, []Response{{Status: 404, Body: []byte(`{}`)}}), []int{404}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(filepath.Join("testdata", "golden"), 0o755); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "golden", "response_"+tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, tc.body, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(want, tc.body) {
				t.Errorf("differs from %s:\n%s", golden, tc.body)
			}
			outer := firstLineBoundary(tc.body)
			mr := multipart.NewReader(bytes.NewReader(tc.body), outer)
			p, err := mr.NextPart()
			if err != nil {
				t.Fatal(err)
			}
			inner, err := io.ReadAll(p)
			if err != nil {
				t.Fatal(err)
			}
			ir := multipart.NewReader(bytes.NewReader(inner), firstLineBoundary(inner))
			var got []int
			for {
				ip, err := ir.NextPart()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(ip)
				resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
				if err != nil {
					t.Fatalf("%v: %q", err, raw)
				}
				got = append(got, resp.StatusCode)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("statuses %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("statuses %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func firstLineBoundary(b []byte) string {
	end := bytes.IndexByte(b, '\n')
	if end > 0 && b[end-1] == '\r' {
		end--
	}
	return string(b[2:end])
}

func TestAppendQueryResponse(t *testing.T) {
	got := AppendQueryResponse(nil, "b", &Response{Status: 200, Header: []Header{{"Content-Type", "application/json"}}, Body: []byte(`{}`)})
	want := "--b\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}\r\n--b--\r\n"
	if string(got) != want {
		t.Fatalf("got %q", got)
	}
}
