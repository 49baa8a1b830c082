package batch

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
)

// Header is one response header line; sub-responses keep the order in
// which the service writes its headers.
type Header struct {
	Name, Value string
}

// Response is one sub-response.
type Response struct {
	Status int
	Header []Header
	Body   []byte
}

// ContentType is the Content-Type of a batch body with the given boundary.
func ContentType(boundary string) string {
	return "multipart/mixed; boundary=" + boundary
}

// AppendResponse appends a batch response body: a change set part (with
// boundary changesetBoundary) holding one application/http part per
// response, inside the batch boundary. The caller sends it with status 202
// and Content-Type ContentType(boundary).
func AppendResponse(dst []byte, boundary, changesetBoundary string, responses []Response) []byte {
	dst = append(dst, "--"...)
	dst = append(dst, boundary...)
	dst = append(dst, "\r\nContent-Type: multipart/mixed; boundary="...)
	dst = append(dst, changesetBoundary...)
	dst = append(dst, "\r\n\r\n"...)
	for i := range responses {
		dst = append(dst, "--"...)
		dst = append(dst, changesetBoundary...)
		dst = append(dst, "\r\n"...)
		dst = appendHTTPPart(dst, &responses[i])
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "--"...)
	dst = append(dst, changesetBoundary...)
	dst = append(dst, "--\r\n--"...)
	dst = append(dst, boundary...)
	return append(dst, "--\r\n"...)
}

// AppendQueryResponse appends the response body of a batch made of one
// query: a single application/http part directly inside the batch boundary.
func AppendQueryResponse(dst []byte, boundary string, resp *Response) []byte {
	dst = append(dst, "--"...)
	dst = append(dst, boundary...)
	dst = append(dst, "\r\n"...)
	dst = appendHTTPPart(dst, resp)
	dst = append(dst, "\r\n--"...)
	dst = append(dst, boundary...)
	return append(dst, "--\r\n"...)
}

// appendHTTPPart writes the part headers, the status line, the response
// headers, a blank line and the body (without a line break after it: the
// next delimiter brings its own).
func appendHTTPPart(dst []byte, r *Response) []byte {
	dst = append(dst, "Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\nHTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, ' ')
	dst = append(dst, http.StatusText(r.Status)...)
	dst = append(dst, "\r\n"...)
	for _, h := range r.Header {
		dst = append(dst, h.Name...)
		dst = append(dst, ": "...)
		dst = append(dst, h.Value...)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	return append(dst, r.Body...)
}

// AppendRequestBody appends a batch request body in the layout of the
// official SDKs: one change set (boundary changesetBoundary) holding reqs,
// inside boundary. A query batch (one GET) is written without a change
// set when changesetBoundary is empty. It is the inverse of Parse, for
// tests and tools.
func AppendRequestBody(dst []byte, boundary, changesetBoundary string, reqs []Request) []byte {
	dst = append(dst, "--"...)
	dst = append(dst, boundary...)
	dst = append(dst, "\r\n"...)
	if changesetBoundary == "" {
		for i := range reqs {
			if i > 0 {
				dst = append(dst, "\r\n--"...)
				dst = append(dst, boundary...)
				dst = append(dst, "\r\n"...)
			}
			dst = appendRequestPart(dst, &reqs[i])
		}
	} else {
		dst = append(dst, "Content-Type: multipart/mixed; boundary="...)
		dst = append(dst, changesetBoundary...)
		dst = append(dst, "\r\n\r\n"...)
		for i := range reqs {
			dst = append(dst, "--"...)
			dst = append(dst, changesetBoundary...)
			dst = append(dst, "\r\n"...)
			dst = appendRequestPart(dst, &reqs[i])
			dst = append(dst, "\r\n"...)
		}
		dst = append(dst, "--"...)
		dst = append(dst, changesetBoundary...)
		dst = append(dst, "--\r\n"...)
	}
	dst = append(dst, "\r\n--"...)
	dst = append(dst, boundary...)
	return append(dst, "--\r\n"...)
}

func appendRequestPart(dst []byte, r *Request) []byte {
	dst = append(dst, "Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n"...)
	if r.ContentID != "" {
		dst = append(dst, "Content-ID: "...)
		dst = append(dst, r.ContentID...)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	dst = append(dst, r.Method...)
	dst = append(dst, ' ')
	dst = append(dst, r.Target...)
	dst = append(dst, " HTTP/1.1\r\n"...)
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		for _, v := range r.Header[k] {
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	dst = append(dst, "\r\n"...)
	return append(dst, r.Body...)
}
