package frontend

import (
	"strings"
	"sync"

	"tablestore/internal/edm"
)

// Header values shared by every response. net/http only reads header
// slices, so one backing array serves all requests without allocating.
var (
	contentTypeNoMeta      = []string{"application/json;odata=nometadata;streaming=true;charset=utf-8"}
	contentTypeMinimalMeta = []string{"application/json;odata=minimalmetadata;streaming=true;charset=utf-8"}
	contentTypeFullMeta    = []string{"application/json;odata=fullmetadata;streaming=true;charset=utf-8"}
	contentTypeXML         = []string{"application/xml"}
	contentTypeXMLUTF8     = []string{"application/xml; charset=utf-8"}
	noSniff                = []string{"nosniff"}
	noCache                = []string{"no-cache"}
	defaultVersion         = []string{"2019-02-02"}
	returnContent          = []string{"return-content"}
	returnNoContent        = []string{"return-no-content"}
	wwwAuthenticate        = []string{"Bearer authorization_uri=https://login.microsoftonline.com/common/oauth2/authorize resource_id=https://storage.azure.com"}
)

func contentTypeFor(m edm.Metadata) []string {
	switch m {
	case edm.NoMetadata:
		return contentTypeNoMeta
	case edm.FullMetadata:
		return contentTypeFullMeta
	}
	return contentTypeMinimalMeta
}

// negotiate picks the JSON metadata level from $format (which wins, as in
// OData v3) or Accept. Missing, "*/*", "application/json" and anything
// unrecognised get minimal metadata; Atom/XML (which Azure dropped in
// 2015-12-11) gets 415 AtomFormatNotSupported.
func negotiate(format string, accept []string) (edm.Metadata, error) {
	if format != "" {
		return mediaType(format, true)
	}
	if len(accept) == 0 {
		return edm.MinimalMetadata, nil
	}
	// Fast path: the SDKs send exactly one of these.
	if len(accept) == 1 {
		switch accept[0] {
		case "application/json;odata=minimalmetadata", "application/json", "*/*", "":
			return edm.MinimalMetadata, nil
		case "application/json;odata=nometadata":
			return edm.NoMetadata, nil
		case "application/json;odata=fullmetadata":
			return edm.FullMetadata, nil
		}
	}
	// Slow path: a list of media ranges, possibly with spaces and q values.
	sawXML := false
	for _, h := range accept {
		for part := range strings.SplitSeq(h, ",") {
			m, err := mediaType(part, false)
			if err == errAtomNotSupported {
				sawXML = true
				continue
			}
			if err == nil && m != metaUnknown {
				return m, nil
			}
		}
	}
	if sawXML {
		return 0, errAtomNotSupported
	}
	return edm.MinimalMetadata, nil
}

// metaUnknown marks a media range that says nothing about the format.
const metaUnknown edm.Metadata = 255

// mediaType reads one media range. strict (for $format) makes a non-JSON,
// non-XML value an error.
func mediaType(s string, strict bool) (edm.Metadata, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	typ, params, _ := strings.Cut(s, ";")
	typ = strings.TrimSpace(typ)
	switch typ {
	case "application/json", "json":
	case "application/atom+xml", "application/xml", "text/xml", "atom", "xml":
		return 0, errAtomNotSupported
	case "*/*", "application/*", "":
		if strict {
			return 0, errInvalidQueryParam("$format", s)
		}
		return metaUnknown, nil
	default:
		if strict {
			return 0, errInvalidQueryParam("$format", s)
		}
		return metaUnknown, nil
	}
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if strings.TrimSpace(k) != "odata" {
			continue
		}
		switch strings.TrimSpace(v) {
		case "nometadata":
			return edm.NoMetadata, nil
		case "fullmetadata":
			return edm.FullMetadata, nil
		case "minimalmetadata", "verbose":
			return edm.MinimalMetadata, nil
		}
	}
	return edm.MinimalMetadata, nil
}

// buffer pooling for response bodies: one request builds its body in a
// pooled slice and writes it once, with Content-Length.
type byteBuf struct{ b []byte }

var bufPool = sync.Pool{New: func() any { return &byteBuf{b: make([]byte, 0, 4096)} }}

func getBuf() *byteBuf { return bufPool.Get().(*byteBuf) }

func putBuf(b *byteBuf) {
	if cap(b.b) > 1<<20 { // do not pin huge query pages
		return
	}
	b.b = b.b[:0]
	bufPool.Put(b)
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte { return edm.AppendJSONString(b, s) }

// appendKeyLiteral appends an OData string literal for a key in a URL, for
// Location and DataServiceId: single quotes doubled and left as they are
// (a quote is legal in a URL path), other characters outside the URL's
// unreserved and sub-delimiter sets percent-encoded, the way the service
// writes them. The service's recorded Location for the PartitionKey
// A'aaa_bbbb2" (the JavaScript SDK's recording "should handle partition
// and row keys with special chars") is
//
//	…(PartitionKey='A''aaa_bbbb2%22',…)
func appendKeyLiteral(b []byte, s string) []byte {
	b = append(b, '\'')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			b = append(b, "''"...)
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '-', c == '_', c == '.', c == '~', c == '!', c == '*', c == '$',
			c == '&', c == '+', c == ',', c == ';', c == '=', c == ':', c == '@':
			b = append(b, c)
		default:
			b = append(b, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&0xF])
		}
	}
	return append(b, '\'')
}

// appendEntityPath appends "tbl(PartitionKey='…',RowKey='…')".
func appendEntityPath(b []byte, table, pk, rk string) []byte {
	b = append(b, table...)
	b = append(b, "(PartitionKey="...)
	b = appendKeyLiteral(b, pk)
	b = append(b, ",RowKey="...)
	b = appendKeyLiteral(b, rk)
	return append(b, ')')
}
