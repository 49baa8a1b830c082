package frontend

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"tablestore/internal/edm"
)

// routeKind is the resource a URL addresses.
type routeKind uint8

const (
	routeService   routeKind = iota + 1 // "/" (service properties, stats)
	routeTables                         // "/Tables", "/Tables()"
	routeTable                          // "/Tables('t')"
	routeBatch                          // "/$batch"
	routeEntitySet                      // "/t", "/t()"
	routeEntity                         // "/t(PartitionKey='p',RowKey='r')"
)

// route is a parsed resource path.
type route struct {
	kind  routeKind
	table string // routeTable, routeEntitySet, routeEntity
	pk    string // routeEntity
	rk    string
}

// secondarySuffix marks the read-access secondary endpoint of an account
// (RA-GRS): /<account>-secondary/… path-style, <account>-secondary.… host-style.
const secondarySuffix = "-secondary"

// addressedAccount is the account a request names and whether it names the
// account's secondary endpoint.
type addressedAccount struct {
	name      string
	secondary bool
	hostStyle bool
}

// hasAccount reports whether name is an account this server serves.
func (s *Server) hasAccount(name string) bool { return s.currentAuth().accounts[name] }

// accountOf reads an account name (possibly with the secondary suffix) and
// reports whether it is one this server serves.
func (s *Server) accountOf(label string) (addressedAccount, bool) {
	if s.hasAccount(label) {
		return addressedAccount{name: label}, true
	}
	if name, ok := strings.CutSuffix(label, secondarySuffix); ok && s.hasAccount(name) {
		return addressedAccount{name: name, secondary: true}, true
	}
	return addressedAccount{}, false
}

// resourcePath strips the account from the request path (see Config for
// path-style vs host-style) and returns the rest, still escaped unless
// decoded is set, plus the account addressed.
//
// The path is read from URL.RawPath when net/http kept one (the client's
// escaping differs from Go's canonical one, which is always the case for
// entity URLs with their literal quotes), so that an escaped '/' inside a
// key cannot split the path; otherwise URL.Path is already the decoded
// path and is equivalent.
func (s *Server) resourcePath(r *http.Request) (p string, decoded bool, acct addressedAccount, err error) {
	p, decoded = r.URL.RawPath, false
	if p == "" {
		p, decoded = r.URL.Path, true
	}
	first := p
	if len(first) > 0 && first[0] == '/' {
		first = first[1:]
	}
	if i := strings.IndexByte(first, '/'); i >= 0 {
		first = first[:i]
	}
	if a, ok := s.accountOf(first); ok {
		return p[1+len(first):], decoded, a, nil
	}
	if s.cfg.HostStyle {
		if label, ok := productionStyleLabel(r.Host); ok {
			if a, ok := s.accountOf(strings.ToLower(label)); ok {
				a.hostStyle = true
				return p, decoded, a, nil
			}
		}
	}
	return "", decoded, addressedAccount{}, newAPIError(http.StatusBadRequest, "InvalidUri", msgInvalidURI,
		"path "+p+" does not start with an account this server serves")
}

// productionStyleLabel returns the first label of a production-style host
// (account.table.localhost:10002), as Azurite reads it: a host that is
// neither an IP address nor host.docker.internal and has a dot.
func productionStyleLabel(host string) (string, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if net.ParseIP(strings.Trim(host, "[]")) != nil || strings.EqualFold(host, "host.docker.internal") {
		return "", false
	}
	i := strings.IndexByte(host, '.')
	if i <= 0 {
		return "", false
	}
	return host[:i], true
}

// parseRoute parses the resource path (after the account).
func parseRoute(p string, decoded bool) (route, error) {
	if p == "" || p == "/" {
		return route{kind: routeService}, nil
	}
	seg := p[1:]
	if strings.IndexByte(seg, '/') >= 0 {
		return route{}, errInvalidURI
	}
	name, inner, hasParens, err := splitSegment(seg)
	if err != nil {
		return route{}, err
	}
	if !decoded {
		if name, err = unescape(name); err != nil {
			return route{}, err
		}
	}
	switch {
	case strings.EqualFold(name, "Tables"):
		if !hasParens || inner == "" {
			return route{kind: routeTables}, nil
		}
		if !decoded {
			if inner, err = unescape(inner); err != nil {
				return route{}, err
			}
		}
		t, err := parseTableKey(inner)
		if err != nil {
			return route{}, err
		}
		return route{kind: routeTable, table: t}, nil
	case name == "$batch":
		if hasParens {
			return route{}, errInvalidURI
		}
		return route{kind: routeBatch}, nil
	}
	if err := validateTableName(name); err != nil {
		return route{}, err
	}
	if !hasParens || inner == "" {
		return route{kind: routeEntitySet, table: name}, nil
	}
	if !decoded {
		if inner, err = unescape(inner); err != nil {
			return route{}, err
		}
	}
	pk, rk, err := parseEntityKeys(inner)
	if err != nil {
		return route{}, err
	}
	return route{kind: routeEntity, table: name, pk: pk, rk: rk}, nil
}

// splitSegment splits "name(inner)" (or "name") at the parentheses.
func splitSegment(seg string) (name, inner string, hasParens bool, err error) {
	i := strings.IndexByte(seg, '(')
	if i < 0 {
		if strings.IndexByte(seg, ')') >= 0 {
			return "", "", false, errQuerySyntax
		}
		return seg, "", false, nil
	}
	if seg[len(seg)-1] != ')' {
		return "", "", false, errQuerySyntax
	}
	return seg[:i], seg[i+1 : len(seg)-1], true, nil
}

func unescape(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	u, err := url.PathUnescape(s)
	if err != nil {
		return "", errQuerySyntax
	}
	return u, nil
}

// parseTableKey reads the key of "Tables('t')" (or "Tables(TableName='t')").
func parseTableKey(inner string) (string, error) {
	inner = strings.TrimSpace(inner)
	if rest, ok := strings.CutPrefix(inner, "TableName"); ok {
		rest = strings.TrimSpace(rest)
		if !strings.HasPrefix(rest, "=") {
			return "", errQuerySyntax
		}
		inner = strings.TrimSpace(rest[1:])
	}
	v, rest, err := parseStringLiteral(inner)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(rest) != "" {
		return "", errKeyCount
	}
	return v, nil
}

// parseEntityKeys reads "PartitionKey='p',RowKey='r'" (either order) from
// the decoded text inside an entity URL's parentheses. Quotes inside a key
// are doubled. Anything but exactly those two keys is Azure's InvalidInput:
// malformed text "Bad Request - Error in query syntax.", a missing or
// extra key "The number of keys specified in the URI does not match…".
func parseEntityKeys(inner string) (pk, rk string, err error) {
	var havePK, haveRK bool
	s := inner
	n := 0
	for {
		s = strings.TrimLeft(s, " ")
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			// A positional key such as t('a') names one key of two.
			if _, rest, err := parseStringLiteral(s); err == nil && strings.TrimSpace(rest) == "" {
				return "", "", errKeyCount
			}
			return "", "", errQuerySyntax
		}
		name := strings.TrimSpace(s[:eq])
		v, rest, err := parseStringLiteral(strings.TrimLeft(s[eq+1:], " "))
		if err != nil {
			return "", "", err
		}
		n++
		switch name {
		case "PartitionKey":
			if havePK {
				return "", "", errQuerySyntax
			}
			pk, havePK = v, true
		case "RowKey":
			if haveRK {
				return "", "", errQuerySyntax
			}
			rk, haveRK = v, true
		default:
			return "", "", errQuerySyntax
		}
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		if rest[0] != ',' {
			return "", "", errQuerySyntax
		}
		s = rest[1:]
	}
	if !havePK || !haveRK || n != 2 {
		return "", "", errKeyCount
	}
	return pk, rk, nil
}

// parseStringLiteral reads an OData string literal (single-quoted, a quote
// inside written twice) at the start of s and returns its value and the
// rest of s.
func parseStringLiteral(s string) (val, rest string, err error) {
	if len(s) == 0 || s[0] != '\'' {
		return "", "", errQuerySyntax
	}
	// Fast path: no doubled quote.
	end := strings.IndexByte(s[1:], '\'')
	if end < 0 {
		return "", "", errQuerySyntax
	}
	end++
	if end+1 >= len(s) || s[end+1] != '\'' {
		return s[1:end], s[end+1:], nil
	}
	var b strings.Builder
	b.Grow(len(s))
	i := 1
	for i < len(s) {
		c := s[i]
		if c == '\'' {
			if i+1 < len(s) && s[i+1] == '\'' {
				b.WriteByte('\'')
				i += 2
				continue
			}
			return b.String(), s[i+1:], nil
		}
		b.WriteByte(c)
		i++
	}
	return "", "", errQuerySyntax
}

// validateTableName applies Azure's table name rule,
// ^[A-Za-z][A-Za-z0-9]{2,62}$: a wrong length is OutOfRangeInput, a wrong
// character InvalidResourceName (both 400, for every table and entity
// operation, as the service answers). The reserved name "tables" is handled
// by the callers, since it only reaches here through Create Table.
func validateTableName(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return errTableName(name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return errTableName(name)
		}
	}
	return nil
}

// validateURLKey checks a key read from the URL.
func validateURLKey(which, v string) error {
	err := edm.ValidateKey(v)
	if err == nil && !utf8.ValidString(v) {
		// A %FF in the URL decodes to a byte that is no text: no key
		// (a body's keys are text by JSON) and no string the partition
		// servers' gRPC can carry (500 InternalError before this check).
		err = fmt.Errorf("%w: key is not UTF-8 text", edm.ErrInvalidInput)
	}
	if err != nil {
		if which == "RowKey" {
			return wrapKeyErr("RowKey", err)
		}
		return wrapKeyErr("PartitionKey", err)
	}
	return nil
}

type keyErr struct {
	which string
	err   error
}

func (e *keyErr) Error() string { return e.which + ": " + e.err.Error() }
func (e *keyErr) Unwrap() error { return e.err }

func wrapKeyErr(which string, err error) error { return &keyErr{which: which, err: err} }
