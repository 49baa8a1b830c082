package auth

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// secondarySuffix ends the account segment of the read-access secondary
// endpoint (/<account>-secondary/…).
const secondarySuffix = "-secondary"

// Authorization header schemes of the Table service.
const (
	SchemeSharedKey     = "SharedKey"
	SchemeSharedKeyLite = "SharedKeyLite"
)

// sharedKeyHeader is a parsed "Authorization: <scheme> <account>:<signature>".
type sharedKeyHeader struct {
	scheme    string
	account   string
	signature [sha256.Size]byte // an array: decoding allocated per request
}

var (
	errNoAuthorization    = errors.New("no Authorization header")
	errMalformedSignature = errors.New("malformed Authorization header: signature is not a base64 HMAC-SHA256")
)

// parseAuthorization is deliberately strict about the shape (one scheme we
// know, a non-empty account, a well-formed SHA-256 MAC) so that garbage is
// rejected before any key material is touched.
func parseAuthorization(h string) (sharedKeyHeader, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return sharedKeyHeader{}, errNoAuthorization
	}
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok {
		return sharedKeyHeader{}, errors.New("malformed Authorization header: missing credentials after the scheme")
	}
	if scheme != SchemeSharedKey && scheme != SchemeSharedKeyLite {
		return sharedKeyHeader{}, errors.New("unsupported Authorization scheme (want SharedKey or SharedKeyLite)")
	}
	account, sig, ok := strings.Cut(strings.TrimSpace(rest), ":")
	if !ok || account == "" || sig == "" {
		return sharedKeyHeader{}, errors.New("malformed Authorization header: want <account>:<signature>")
	}
	// Decoded on the stack: a MAC's 44 characters, and anything up to 64
	// (which cannot decode to 32 bytes either), fit the arrays.
	var src [64]byte
	var raw [48]byte
	if len(sig) > len(src) {
		return sharedKeyHeader{}, errMalformedSignature
	}
	n, err := base64.StdEncoding.Decode(raw[:], src[:copy(src[:], sig)])
	if err != nil || n != sha256.Size {
		return sharedKeyHeader{}, errMalformedSignature
	}
	hdr := sharedKeyHeader{scheme: scheme, account: account}
	copy(hdr.signature[:], raw[:n])
	return hdr, nil
}

// requestDate follows the Table service rule: x-ms-date wins over Date so
// that clients which cannot set Date (browsers) can still sign.
func requestDate(h http.Header) string {
	if d := h.Get("x-ms-date"); d != "" {
		return d
	}
	return h.Get("Date")
}

// candidateDates lists the dates a client may have signed, documented rule
// first. Azurite signs Date when both headers are present, so clients tested
// against it may too; each date is checked against the skew on its own.
// They are returned in an array (no allocation per request); the header
// names are looked up canonical, as Header.Get would after canonicalizing.
func candidateDates(h http.Header) (dates [2]string, n int) {
	if d := firstValue(h, "X-Ms-Date"); d != "" {
		dates[n] = d
		n++
	}
	if d := firstValue(h, "Date"); d != "" && (n == 0 || dates[0] != d) {
		dates[n] = d
		n++
	}
	return dates, n
}

// firstValue is h.Get(key) for a key already in canonical form.
func firstValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// compSuffix is the only query parameter that takes part in the Table
// service's canonicalized resource.
func compSuffix(u *url.URL) string {
	if !strings.Contains(u.RawQuery, "comp") && !strings.Contains(u.RawQuery, "%") {
		// No key can read "comp" (parsing the query allocates its map).
		return ""
	}
	// A malformed query still yields the pairs before the bad one; that is
	// the best guess at what the client signed (the Go SDK refuses to sign).
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil && strings.IndexByte(u.RawQuery, ';') >= 0 {
		// The comp signed must be the comp the front-end acts on, and it
		// reads a ';' as part of a value (an unescaped
		// "$format=application/json;odata=nometadata") where ParseQuery
		// drops the pair: "comp=x;&comp=acl" is comp "x;" there, a Query
		// Entities that a Get Table ACL signature would otherwise open.
		q, _ = url.ParseQuery(strings.ReplaceAll(u.RawQuery, ";", "%3B"))
	}
	if v, ok := q["comp"]; ok && len(v) > 0 {
		return "?comp=" + v[0]
	}
	return ""
}

// clientPath is what a client signs: the escaped path, "/" for an empty one.
func clientPath(u *url.URL) string {
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	return p
}

func sharedKeyLiteStringToSign(date, canonicalizedResource string) string {
	return date + "\n" + canonicalizedResource
}

func sharedKeyStringToSign(h http.Header, method, date, canonicalizedResource string) string {
	return method + "\n" + h.Get("Content-MD5") + "\n" + h.Get("Content-Type") + "\n" + date + "\n" + canonicalizedResource
}

// candidatePaths lists the path spellings a legitimate client may have
// signed. Clients differ (escaped as sent, re-escaped by their URL library,
// or unescaped), and with a path-style endpoint
// (http://host:10002/devstoreaccount1) some sign the account segment and
// some do not; Azurite accepts all of these and so do we. Every candidate
// still names the same resource the request addresses.
func candidatePaths(r *http.Request, account string) []string {
	var forms []string
	add := func(p string) {
		for _, f := range forms {
			if f == p {
				return
			}
		}
		forms = append(forms, p)
	}
	add(r.URL.EscapedPath())
	if ru := r.RequestURI; strings.HasPrefix(ru, "/") {
		raw, _, _ := strings.Cut(ru, "?")
		add(raw)
	}
	if !strings.Contains(r.URL.Path, "%") {
		// The unescaped spelling names this resource only when it holds
		// no '%': "t(PartitionKey='a%41')" is both the unescaped path of
		// key "a%41" (sent as a%2541) and the escaped path of key "aA",
		// and a signature over it must not open both. Without '%' no
		// other request's escaped path can read the same.
		add(r.URL.Path)
	}
	add((&url.URL{Path: r.URL.Path}).EscapedPath())

	prefix := "/" + account
	var out []string
	seen := map[string]bool{}
	push := func(p string) {
		if p == "" {
			p = "/"
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	secondary := prefix + secondarySuffix
	// accountOnce pushes the path without its account segment, unless
	// that is the account root's path as SDKs sign it with path-style
	// URLs ("/<account>"): a table named like the account would then
	// accept the signature of a request to the root (Get Service
	// Properties, which has the same comp).
	accountOnce := func(rest string) {
		if rest != prefix {
			push(rest)
		}
	}
	for _, p := range forms {
		push(p)
		if p == prefix || p == secondary {
			push("/")
		} else if strings.HasPrefix(p, prefix+"/") {
			accountOnce(p[len(prefix):])
		} else if strings.HasPrefix(p, secondary+"/") {
			// The read-access secondary (/<account>-secondary/…): clients
			// sign the path as sent or the primary's, as Azurite accepts.
			push(prefix + p[len(secondary):])
			accountOnce(p[len(secondary):])
		}
	}
	return out
}

// verifySharedKey checks an Authorization header against every candidate
// canonicalized resource; comparisons are constant-time per candidate.
// signatureMatches checks the signature over one canonicalized resource.
// The canonicalized resource is "/" + account + path + comp; the string to
// sign is built in a pooled buffer (the concatenations allocated twice per
// request, and the MAC once more for the conversion to bytes).
func signatureMatches(r *http.Request, hdr sharedKeyHeader, keys [][]byte, date, account, path, comp string) bool {
	bp := stsBufs.Get().(*[]byte)
	b := (*bp)[:0]
	if hdr.scheme != SchemeSharedKeyLite {
		b = append(b, r.Method...)
		b = append(b, '\n')
		b = append(b, firstValue(r.Header, "Content-Md5")...)
		b = append(b, '\n')
		b = append(b, firstValue(r.Header, "Content-Type")...)
		b = append(b, '\n')
	}
	b = append(b, date...)
	b = append(b, '\n', '/')
	b = append(b, account...)
	b = append(b, path...)
	b = append(b, comp...)
	ok := anyKeyMatchesBytes(keys, b, hdr.signature[:])
	if cap(b) <= maxPooledSTS {
		*bp = b[:0]
		stsBufs.Put(bp)
	}
	return ok
}

// sharedKeyPrincipal is the Principal of a verified SharedKey or
// SharedKeyLite signature of account, one of a.sharedKey's.
func (a *Authenticator) sharedKeyPrincipal(account, scheme string) *Principal {
	p := a.sharedKey[account] // verified with one of its keys, so present
	if scheme == SchemeSharedKey {
		return &p[0]
	}
	return &p[1]
}

// stsBufs are the buffers signatureMatches builds strings to sign in;
// one longer than maxPooledSTS (a very long path) is left to the GC.
var stsBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

const maxPooledSTS = 4 << 10

func (a *Authenticator) verifySharedKey(r *http.Request, hdr sharedKeyHeader, account string, keys [][]byte) (*Principal, error) {
	if hdr.account != account {
		// A key of one account never opens another, even one this
		// server serves.
		return nil, authFailed("the Authorization header names account %q but the request addresses %q", hdr.account, account)
	}
	dateArr, nd := candidateDates(r.Header)
	dates := dateArr[:nd]
	if len(dates) == 0 {
		return nil, authFailed("request has neither x-ms-date nor Date")
	}
	comp := compSuffix(r.URL)
	// The path as sent is what every SDK signs; the other spellings are
	// only worked out when it does not match.
	var paths []string
	first := r.URL.EscapedPath()
	now := a.now()
	var dateErr error
	checked := false
	for _, date := range dates {
		t, err := a.parseDate(date)
		if err != nil {
			if dateErr == nil {
				dateErr = authFailed("request date %q is not an RFC 1123 date", date)
			}
			continue
		}
		if d := now.Sub(t); d > a.skew || d < -a.skew {
			if dateErr == nil {
				dateErr = authFailed("request date %s is outside the allowed clock skew of %s (server time %s)",
					t.UTC().Format(http.TimeFormat), a.skew, now.UTC().Format(time.RFC3339))
			}
			continue
		}
		checked = true
		if paths == nil {
			if signatureMatches(r, hdr, keys, date, account, first, comp) {
				return a.sharedKeyPrincipal(account, hdr.scheme), nil
			}
			paths = candidatePaths(r, account)
		}
		for _, p := range paths {
			if signatureMatches(r, hdr, keys, date, account, p, comp) {
				return a.sharedKeyPrincipal(account, hdr.scheme), nil
			}
		}
	}
	if !checked {
		return nil, dateErr
	}
	// Like Azure, show the expected string-to-sign: it is what a client
	// author needs and reveals nothing about the key.
	cr := "/" + account + clientPath(r.URL) + comp
	want := sharedKeyLiteStringToSign(dates[0], cr)
	if hdr.scheme == SchemeSharedKey {
		want = sharedKeyStringToSign(r.Header, r.Method, dates[0], cr)
	}
	return nil, authFailed("the %s signature does not match any computed signature; the server used the string to sign %q", hdr.scheme, want)
}

// SignSharedKeyLite signs r the way the Go aztables SDK does: it sets
// x-ms-date when absent and signs date + canonicalized resource.
func SignSharedKeyLite(r *http.Request, acct Account) error {
	if err := checkAccount(acct); err != nil {
		return err
	}
	date := ensureDate(r)
	cr := "/" + acct.Name + clientPath(r.URL) + compSuffix(r.URL)
	r.Header.Set("Authorization", SchemeSharedKeyLite+" "+acct.Name+":"+acct.sign(sharedKeyLiteStringToSign(date, cr)))
	return nil
}

// SignSharedKey signs r with the Table service's SharedKey flavour (verb,
// Content-MD5, Content-Type, date, canonicalized resource), setting
// x-ms-date when no date header is present.
func SignSharedKey(r *http.Request, acct Account) error {
	if err := checkAccount(acct); err != nil {
		return err
	}
	date := ensureDate(r)
	cr := "/" + acct.Name + clientPath(r.URL) + compSuffix(r.URL)
	r.Header.Set("Authorization", SchemeSharedKey+" "+acct.Name+":"+acct.sign(sharedKeyStringToSign(r.Header, r.Method, date, cr)))
	return nil
}

func ensureDate(r *http.Request) string {
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if d := requestDate(r.Header); d != "" {
		return d
	}
	d := time.Now().UTC().Format(http.TimeFormat)
	r.Header.Set("x-ms-date", d)
	return d
}

func checkAccount(acct Account) error {
	if acct.Name == "" || len(acct.Key) == 0 {
		return errors.New("auth: account name and key must not be empty")
	}
	return nil
}
