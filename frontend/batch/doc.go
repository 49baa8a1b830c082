// Package batch owns the wire format of Azure Table entity group
// transactions (POST /$batch): parsing the multipart/mixed request into its
// sub-requests and writing the multipart/mixed response. It knows nothing
// about tables or entities; package frontend gives the sub-requests their
// meaning, validates the transaction rules and applies it.
//
// # Request
//
// The body is a multipart/mixed document (boundary batch_<id>) with exactly
// one part: either a change set (multipart/mixed, boundary changeset_<id>)
// holding the write operations, or a single application/http part holding a
// query. Each operation part carries Content-Type: application/http and
// Content-Transfer-Encoding: binary, then an HTTP/1.1 request: request line
// (METHOD, absolute URL or path, HTTP/1.1), headers, a blank line, the body.
//
// The parser is strict about structure (a boundary parameter, delimiter
// lines, a close delimiter, application/http parts, a well-formed request
// line and header lines) and tolerant of what real clients send:
//
//   - CRLF or bare LF line ends, transport padding after delimiters, a
//     preamble and epilogue, a quoted boundary parameter;
//   - headers with empty values (the Go SDK writes "DataServiceVersion:" and
//     "X-Ms-Version:" with nothing after the colon), any header case;
//   - blank lines around a body (the JavaScript SDK writes an extra CRLF
//     before each JSON body): bodies are trimmed of surrounding whitespace,
//     which JSON ignores anyway;
//   - sub-request URLs are returned as written; undoubled quotes in keys
//     (another Go SDK habit) are the caller's business.
//
// A change set of more than MaxOperations parts is reported with
// ErrTooManyOperations as soon as the 101st part is seen, so a 4 MiB body
// of tiny parts costs no more than one of 101.
//
// # Response
//
// AppendResponse writes Azure's shape, byte for byte as recorded from the
// service (Go and JavaScript SDK test recordings): the body starts with the
// "--batchresponse_<id>" delimiter line, because the Go SDK reads the
// boundary from the body's first line rather than from Content-Type; then a
// change set part whose body holds one application/http part per
// sub-response, each an HTTP/1.1 status line, headers, a blank line and a
// body, every line ending in CRLF.
package batch
