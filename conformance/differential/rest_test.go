package differential

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"tablestore/frontend/auth"
)

// The write, batch and Query Tables comparisons talk REST directly: they
// need the status, the error code, the ETag header and a $batch body as
// sent, which the SDK hides or rewrites.

// reply is one REST answer, read whole.
type reply struct {
	status int // -1: transport error
	code   string
	msg    string
	etag   string
	body   []byte
	hdr    http.Header
}

func (r reply) text() string {
	if r.status < 0 {
		return "transport error " + r.msg
	}
	if r.code != "" {
		return fmt.Sprintf("%d %s", r.status, r.code)
	}
	return strconv.Itoa(r.status)
}

// do sends one signed request to base (tsURL or azURL) + path.
func do(base, method, path string, hdr map[string]string, body []byte) reply {
	r, err := http.NewRequest(method, base+path, bytes.NewReader(body))
	if err != nil {
		return reply{status: -1, msg: err.Error()}
	}
	if body == nil {
		r.Body, r.ContentLength = http.NoBody, 0
	}
	r.Header.Set("x-ms-version", "2019-02-02")
	r.Header.Set("DataServiceVersion", "3.0")
	r.Header.Set("Accept", "application/json;odata=minimalmetadata")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if v == "" {
			r.Header.Del(k)
			continue
		}
		r.Header.Set(k, v)
	}
	if err := auth.SignSharedKeyLite(r, auth.DevAccount()); err != nil {
		return reply{status: -1, msg: err.Error()}
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return reply{status: -1, msg: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, etag: resp.Header.Get("ETag"), body: b, hdr: resp.Header}
	if resp.StatusCode >= 300 {
		out.code, out.msg = odataError(b)
		if c := resp.Header.Get("x-ms-error-code"); c != "" {
			out.code = c
		}
	}
	return out
}

// odataError reads the code and message of an OData JSON error body.
func odataError(b []byte) (code, msg string) {
	var e struct {
		Err struct {
			Code    string `json:"code"`
			Message struct {
				Value string `json:"value"`
			} `json:"message"`
		} `json:"odata.error"`
	}
	if json.Unmarshal(b, &e) == nil {
		return e.Err.Code, e.Err.Message.Value
	}
	return "", strings.TrimSpace(string(b))
}

// keyPath addresses one entity: quotes doubled, then percent-encoded.
func keyPath(table, pk, rk string) string {
	esc := func(s string) string {
		return strings.ReplaceAll(url.PathEscape(strings.ReplaceAll(s, "'", "''")), "'", "%27")
	}
	return "/" + table + "(PartitionKey='" + esc(pk) + "',RowKey='" + esc(rk) + "')"
}

// etagShape is the form of an ETag, its value left out: Azure's is
// W/"datetime'<Timestamp, colons as %3A>'".
var etagRE = regexp.MustCompile(`^W/"datetime'\d{4}-\d\d-\d\dT\d\d%3A\d\d%3A\d\d(\.\d{1,7})?Z'"$`)

func etagShape(e string) string {
	switch {
	case e == "":
		return "none"
	case etagRE.MatchString(e):
		return "W/datetime"
	}
	return "other form"
}
