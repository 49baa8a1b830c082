package batch

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/textproto"
	"strings"
)

// MaxOperations is the most operations one change set may hold (Azure's
// limit for an entity group transaction).
const MaxOperations = 100

// maxHeaderLines bounds the header lines of one part or sub-request: real
// clients send fewer than fifteen, and the bound keeps a hostile body from
// building huge header maps.
const maxHeaderLines = 100

// Sentinel errors. Every error returned by Parse wraps exactly one of them.
var (
	// ErrContentType: the request's Content-Type is not multipart/mixed
	// with a boundary.
	ErrContentType = errors.New("batch: Content-Type must be multipart/mixed with a boundary")
	// ErrMalformed: the body is not a well-formed batch (delimiters, part
	// headers, request lines, header lines).
	ErrMalformed = errors.New("batch: malformed batch body")
	// ErrTooManyOperations: the change set holds more than MaxOperations
	// operations.
	ErrTooManyOperations = errors.New("batch: too many operations in the change set")
	// ErrMultipleParts: the batch holds more than one part (several change
	// sets, or a change set and a query); Azure processes one.
	ErrMultipleParts = errors.New("batch: a batch holds exactly one change set or one query")
	// ErrEmpty: the batch or its change set holds no operation.
	ErrEmpty = errors.New("batch: no operation")
)

// Request is one sub-request of a batch.
type Request struct {
	// Method is the request method as written (GET, POST, PUT, PATCH,
	// MERGE, DELETE, …).
	Method string
	// Target is the request target as written: usually an absolute URL
	// (http://host/account/table(...)?...), possibly a path.
	Target string
	// Header holds the sub-request's headers, canonical keys, values
	// trimmed (possibly empty).
	Header http.Header
	// Body is the sub-request body with surrounding whitespace trimmed; it
	// aliases the parsed body.
	Body []byte
	// ContentID is the part's Content-ID header, if any.
	ContentID string
}

// Batch is a parsed batch request.
type Batch struct {
	// Requests are the operations in the order written.
	Requests []Request
	// Changeset is true when the requests came inside a change set (write
	// operations), false for a batch made of one top-level request (a
	// query).
	Changeset bool
	// Boundary and ChangesetBoundary are the boundaries the client used
	// (ChangesetBoundary is empty without a change set).
	Boundary, ChangesetBoundary string
}

// Parse reads a batch request body given the request's Content-Type.
func Parse(contentType string, body []byte) (*Batch, error) {
	boundary, err := multipartBoundary(contentType)
	if err != nil {
		return nil, err
	}
	parts, err := splitParts(body, boundary, 1)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: the batch has no part", ErrEmpty)
	}
	if len(parts) > 1 {
		return nil, fmt.Errorf("%w: found more than one part", ErrMultipleParts)
	}
	hdr, content, err := readPartHeader(parts[0])
	if err != nil {
		return nil, err
	}
	b := &Batch{Boundary: boundary}
	ct := hdr.Get("Content-Type")
	if isApplicationHTTP(ct) {
		req, err := readRequest(content)
		if err != nil {
			return nil, err
		}
		req.ContentID = hdr.Get("Content-Id")
		b.Requests = []Request{req}
		return b, nil
	}
	csBoundary, err := multipartBoundary(ct)
	if err != nil {
		return nil, fmt.Errorf("%w: the batch part is neither a change set nor application/http (Content-Type %q)", ErrMalformed, ct)
	}
	b.Changeset, b.ChangesetBoundary = true, csBoundary
	ops, err := splitParts(content, csBoundary, MaxOperations)
	if err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("%w: the change set has no operation", ErrEmpty)
	}
	b.Requests = make([]Request, 0, len(ops))
	for i, op := range ops {
		h, content, err := readPartHeader(op)
		if err != nil {
			return nil, fmt.Errorf("operation %d: %w", i, err)
		}
		if ct := h.Get("Content-Type"); !isApplicationHTTP(ct) {
			return nil, fmt.Errorf("%w: operation %d has Content-Type %q, not application/http", ErrMalformed, i, ct)
		}
		if te := h.Get("Content-Transfer-Encoding"); te != "" && !strings.EqualFold(te, "binary") {
			return nil, fmt.Errorf("%w: operation %d has Content-Transfer-Encoding %q, not binary", ErrMalformed, i, te)
		}
		req, err := readRequest(content)
		if err != nil {
			return nil, fmt.Errorf("operation %d: %w", i, err)
		}
		req.ContentID = h.Get("Content-Id")
		b.Requests = append(b.Requests, req)
	}
	return b, nil
}

// multipartBoundary returns the boundary of a multipart/mixed media type.
func multipartBoundary(ct string) (string, error) {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || !strings.EqualFold(mt, "multipart/mixed") {
		return "", fmt.Errorf("%w: got %q", ErrContentType, ct)
	}
	b := params["boundary"]
	if b == "" || len(b) > 200 || strings.ContainsAny(b, "\r\n") {
		return "", fmt.Errorf("%w: got %q", ErrContentType, ct)
	}
	return b, nil
}

func isApplicationHTTP(ct string) bool {
	// Every operation of a change set says so, nearly always bare.
	if strings.EqualFold(ct, "application/http") {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && strings.EqualFold(mt, "application/http")
}

// splitParts returns the contents of the parts of a multipart body: the
// bytes between a delimiter line and the line break before the next one.
// Lines may end in CRLF or LF; a delimiter line may carry transport padding
// (spaces, tabs). The close delimiter is required. More than limit parts is
// ErrTooManyOperations (limit 1 is the outer batch: ErrMultipleParts).
func splitParts(body []byte, boundary string, limit int) ([][]byte, error) {
	dash := "--" + boundary
	var parts [][]byte
	partStart := -1 // start of the current part's content, -1 before the first delimiter
	for pos := 0; pos < len(body); {
		next := len(body)
		if i := bytes.IndexByte(body[pos:], '\n'); i >= 0 {
			next = pos + i + 1
		}
		line := bytes.TrimRight(body[pos:next], " \t\r\n")
		if rest, ok := bytes.CutPrefix(line, []byte(dash)); ok && (len(rest) == 0 || string(rest) == "--") {
			if partStart >= 0 {
				end := pos
				// The line break before the delimiter belongs to it.
				if end > partStart && body[end-1] == '\n' {
					end--
					if end > partStart && body[end-1] == '\r' {
						end--
					}
				}
				if len(parts) == limit {
					if limit == 1 {
						return nil, fmt.Errorf("%w: found more than one part", ErrMultipleParts)
					}
					return nil, fmt.Errorf("%w: more than %d", ErrTooManyOperations, limit)
				}
				parts = append(parts, body[partStart:max(partStart, end)])
			}
			if len(rest) == 2 { // close delimiter; the rest is the epilogue
				return parts, nil
			}
			partStart = next
		}
		pos = next
	}
	if partStart < 0 {
		return nil, fmt.Errorf("%w: no delimiter line for boundary %q", ErrMalformed, boundary)
	}
	return nil, fmt.Errorf("%w: no close delimiter for boundary %q", ErrMalformed, boundary)
}

// nextLine returns the line at the start of b without its line break, and
// the rest after the break. ok is false when b is empty.
func nextLine(b []byte) (line, rest []byte, ok bool) {
	if len(b) == 0 {
		return nil, nil, false
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.TrimSuffix(b, []byte("\r")), nil, true
	}
	return bytes.TrimSuffix(b[:i], []byte("\r")), b[i+1:], true
}

// readHeaders reads header lines up to a blank line and returns the rest.
// A block that ends without the blank line is accepted when requireBlank
// is false (a sub-request without a body may end right after its headers).
func readHeaders(b []byte, requireBlank bool) (http.Header, []byte, error) {
	// A change set of 100 operations reads 200 header blocks: the map is
	// sized for the SDKs' blocks, and the values of one block share a slab
	// (each key's slice capped, so that a repeated header copies instead
	// of overwriting its neighbour), as net/textproto does.
	h := make(http.Header, 8)
	var slab []string
	for n := 0; ; n++ {
		line, rest, ok := nextLine(b)
		if !ok {
			if requireBlank {
				return nil, nil, fmt.Errorf("%w: headers not terminated by a blank line", ErrMalformed)
			}
			return h, nil, nil
		}
		b = rest
		if len(line) == 0 {
			return h, b, nil
		}
		if n == maxHeaderLines {
			return nil, nil, fmt.Errorf("%w: more than %d header lines", ErrMalformed, maxHeaderLines)
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || len(name) == 0 || !validHeaderName(name) {
			return nil, nil, fmt.Errorf("%w: bad header line %q", ErrMalformed, truncate(line))
		}
		key, ok := commonHeaderKeys[string(name)]
		if !ok {
			key = textproto.CanonicalMIMEHeaderKey(string(name))
		}
		v := string(bytes.TrimSpace(value))
		if old := h[key]; len(old) > 0 {
			h[key] = append(old, v)
			continue
		}
		if slab == nil {
			slab = make([]string, 0, 8)
		}
		slab = append(slab, v)
		h[key] = slab[len(slab)-1 : len(slab) : len(slab)]
	}
}

// commonHeaderKeys maps the header names the SDKs write in change sets, as
// they write them, to their canonical keys: looking one up allocates
// nothing, where CanonicalMIMEHeaderKey(string(name)) allocates the name.
var commonHeaderKeys = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"Content-Type", "Content-Transfer-Encoding", "Content-Length", "Content-ID", "Accept",
		"Prefer", "DataServiceVersion", "MaxDataServiceVersion", "X-Ms-Version", "If-Match", "X-HTTP-Method", "Host"} {
		for _, v := range []string{n, strings.ToLower(n), textproto.CanonicalMIMEHeaderKey(n)} {
			m[v] = textproto.CanonicalMIMEHeaderKey(n)
		}
	}
	return m
}()

// validHeaderName accepts RFC 7230 token characters.
func validHeaderName(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// readPartHeader reads a MIME part's headers and returns its body.
func readPartHeader(part []byte) (http.Header, []byte, error) {
	// Blank lines before the headers are tolerated (a preamble-like CRLF
	// some writers emit after the delimiter).
	part = trimLeadingBlankLines(part)
	return readHeaders(part, true)
}

func trimLeadingBlankLines(b []byte) []byte {
	for {
		line, rest, ok := nextLine(b)
		if !ok || len(bytes.TrimSpace(line)) != 0 {
			return b
		}
		b = rest
	}
}

// readRequest reads the HTTP request inside an application/http part.
func readRequest(content []byte) (Request, error) {
	content = trimLeadingBlankLines(content)
	line, rest, ok := nextLine(content)
	if !ok {
		return Request{}, fmt.Errorf("%w: empty application/http part", ErrMalformed)
	}
	f := strings.Fields(string(line))
	if len(f) != 3 || !validMethod(f[0]) || !strings.HasPrefix(f[2], "HTTP/1.") || len(f[2]) != len("HTTP/1.1") {
		return Request{}, fmt.Errorf("%w: bad request line %q", ErrMalformed, truncate(line))
	}
	h, body, err := readHeaders(rest, false)
	if err != nil {
		return Request{}, err
	}
	return Request{Method: f[0], Target: f[1], Header: h, Body: bytes.TrimSpace(body)}, nil
}

func validMethod(m string) bool {
	if len(m) == 0 || len(m) > 16 {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

func truncate(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}
