package batch

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// FuzzParse checks that no body makes the parser panic or step outside its
// contract (one sentinel per error, 1..MaxOperations requests, methods and
// targets without spaces), and that whatever it accepts survives a
// write/parse cycle unchanged. Seeds beyond testdata/fuzz/FuzzParse/ are
// added here so they follow format changes.
func FuzzParse(f *testing.F) {
	f.Add(testContentTyp, []byte(goSDKBody()))
	f.Add(testContentTyp, []byte(jsSDKBody()))
	f.Add(testContentTyp, []byte(strings.ReplaceAll(goSDKBody(), "\r\n", "\n")))
	f.Add(testContentTyp, AppendRequestBody(nil, testBoundary, testChangeset, deletes(3)))
	f.Add(testContentTyp, AppendRequestBody(nil, testBoundary, "", deletes(1)[:1]))
	f.Add(`multipart/mixed; boundary="a b"`, []byte("--a b\r\nContent-Type: multipart/mixed; boundary=c\r\n\r\n--c\r\n--c--\r\n--a b--"))
	sentinels := []error{ErrContentType, ErrMalformed, ErrTooManyOperations, ErrMultipleParts, ErrEmpty}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		b, err := Parse(contentType, body)
		if err != nil {
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 || b != nil {
				t.Fatalf("Parse = %v, %v: want nil and exactly one sentinel", b, err)
			}
			return
		}
		if len(b.Requests) == 0 || len(b.Requests) > MaxOperations || (!b.Changeset && len(b.Requests) != 1) {
			t.Fatalf("%d requests (change set %v)", len(b.Requests), b.Changeset)
		}
		for i, r := range b.Requests {
			if r.Method == "" || r.Target == "" || strings.ContainsAny(r.Method+r.Target, " \t\r\n") {
				t.Fatalf("request %d: method %q target %q", i, r.Method, r.Target)
			}
		}
		cs := b.ChangesetBoundary
		if !b.Changeset {
			cs = ""
		}
		again, err := Parse(ContentType(b.Boundary), AppendRequestBody(nil, b.Boundary, cs, b.Requests))
		if err != nil {
			t.Fatalf("re-parsing what was accepted: %v", err)
		}
		if fmt.Sprintf("%q", again.Requests) != fmt.Sprintf("%q", b.Requests) {
			t.Fatalf("round trip changed the requests:\n%q\n%q", b.Requests, again.Requests)
		}
	})
}
