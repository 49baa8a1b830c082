package auth

import (
	"crypto/hmac"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultClockSkew is how far a SharedKey request date may be from server
// time; Azure rejects requests older than 15 minutes.
const DefaultClockSkew = 15 * time.Minute

// Policy is a stored access policy (a table ACL entry). Zero Start/Expiry and
// an empty Permission mean "not set by the policy".
type Policy struct {
	Start, Expiry time.Time
	Permission    string
}

// PolicyLookup resolves the si of a service SAS to the table's stored access
// policy. account is the account the request addresses and table the SAS tn
// (Azure table names compare case-insensitively).
// found is false when the table has no policy with that id; an error means
// the lookup itself failed and is passed through unwrapped by Authenticate.
type PolicyLookup interface {
	AccessPolicy(account, table, id string) (p Policy, found bool, err error)
}

// Options tune an Authenticator; the zero value is usable.
type Options struct {
	// ClockSkew bounds |now - request date| for SharedKey requests;
	// DefaultClockSkew when zero. SAS windows get no such slack, as in Azure.
	ClockSkew time.Duration
	// Now replaces time.Now, for tests.
	Now func() time.Time
	// Policies resolves stored access policies; without it a SAS naming one
	// (si) fails authentication.
	Policies PolicyLookup
	// Accounts are further accounts and keys accepted besides the one given
	// to NewAuthenticator; an account named twice has two keys, each valid
	// for SharedKey, SharedKeyLite and SAS (Azurite's AZURITE_ACCOUNTS).
	Accounts []Account
	// OAuth accepts "Authorization: Bearer <JWT>" at Azurite's "basic"
	// level (see verifyBearer).
	OAuth bool
}

// Authenticator verifies requests for its accounts.
type Authenticator struct {
	acct     Account             // the default account (Authenticate)
	keys     map[string][][]byte // account name → its keys
	skew     time.Duration
	now      func() time.Time
	policies PolicyLookup
	oauth    bool
	// sharedKey holds the principals a SharedKey and a SharedKeyLite
	// signature of each account authenticate as: they carry nothing of
	// the request, and a Principal is never changed once returned, so
	// one each serves every request instead of an allocation per request.
	sharedKey map[string]*[2]Principal

	// lastDate is the request date parsed last: every request of one
	// second carries the same string, and parsing it was a visible part
	// of a point read's authentication.
	lastDate atomic.Pointer[parsedDate]
}

type parsedDate struct {
	s string
	t time.Time
}

// parseDate is http.ParseTime, remembering the last date parsed.
func (a *Authenticator) parseDate(s string) (time.Time, error) {
	if d := a.lastDate.Load(); d != nil && d.s == s {
		return d.t, nil
	}
	t, err := http.ParseTime(s)
	if err == nil {
		a.lastDate.Store(&parsedDate{s: s, t: t})
	}
	return t, err
}

// NewAuthenticator returns an Authenticator for acct and opts.Accounts.
func NewAuthenticator(acct Account, opts Options) *Authenticator {
	a := &Authenticator{acct: acct, skew: opts.ClockSkew, now: opts.Now, policies: opts.Policies, oauth: opts.OAuth,
		keys: map[string][][]byte{}}
	for _, ac := range append([]Account{acct}, opts.Accounts...) {
		if ac.Name != "" && len(ac.Key) > 0 {
			a.keys[ac.Name] = append(a.keys[ac.Name], ac.Key)
		}
	}
	a.sharedKey = make(map[string]*[2]Principal, len(a.keys))
	for name := range a.keys {
		a.sharedKey[name] = &[2]Principal{
			{kind: PrincipalSharedKey, account: name, scheme: SchemeSharedKey},
			{kind: PrincipalSharedKey, account: name, scheme: SchemeSharedKeyLite},
		}
	}
	if a.skew <= 0 {
		a.skew = DefaultClockSkew
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// Authenticate is AuthenticateAccount for the default account.
func (a *Authenticator) Authenticate(r *http.Request) (*Principal, error) {
	return a.AuthenticateAccount(r, a.acct.Name)
}

// AuthenticateAccount identifies the caller of r, a request addressed to
// account (the URL's): an Authorization header when
// present, otherwise a SAS in the query (a "sig" parameter). It does not
// decide whether the operation is allowed; call Principal.Authorize for that.
//
// Errors wrap ErrAuthenticationFailed, or for a valid SAS used from the wrong
// place ErrAuthorizationSourceIPMismatch / ErrAuthorizationProtocolMismatch;
// a failing PolicyLookup is returned wrapped but as none of those.
func (a *Authenticator) AuthenticateAccount(r *http.Request, account string) (*Principal, error) {
	keys := a.keys[account]
	if len(keys) == 0 {
		return nil, authFailed("account %q is not served here", account)
	}
	if h := r.Header.Values("Authorization"); len(h) > 0 {
		if len(h) > 1 {
			return nil, authFailed("more than one Authorization header")
		}
		if token, ok := bearerToken(h[0]); ok && a.oauth {
			return a.verifyBearer(r, account, token)
		}
		hdr, err := parseAuthorization(h[0])
		if err != nil {
			return nil, authFailed("%v", err)
		}
		return a.verifySharedKey(r, hdr, account, keys)
	}
	q := r.URL.Query()
	if _, ok := q["sig"]; ok {
		return a.verifySAS(r, q, account, keys)
	}
	return nil, authFailed("request carries no Authorization header and no SAS; anonymous access is not supported")
}

func (a *Authenticator) verifySAS(r *http.Request, q map[string][]string, account string, keys [][]byte) (*Principal, error) {
	t, err := parseSAS(q)
	if err != nil {
		return nil, authFailed("%v", err)
	}
	// Nothing in the token is trusted until the signature verifies.
	sts := t.stringToSign(account)
	if !anyKeyMatches(keys, sts, t.sig) {
		return nil, authFailed("SAS signature does not match; the string to sign used was %q", sts)
	}

	perms, start, expiry := t.permissions, t.start, t.expiry
	var policyStart, policyExpiry time.Time
	if t.kind == sasService && t.identifier != "" {
		if a.policies == nil {
			return nil, authFailed("SAS names stored access policy %q but the server has none", t.identifier)
		}
		p, found, err := a.policies.AccessPolicy(account, t.table, t.identifier)
		if err != nil {
			return nil, fmt.Errorf("auth: looking up stored access policy %q of table %q: %w", t.identifier, t.table, err)
		}
		if !found {
			return nil, authFailed("SAS identifier %q cannot be found for table %q", t.identifier, t.table)
		}
		// "You can't specify a parameter on both the SAS token and the stored access policy."
		if (p.Permission != "" && perms != "") || (!p.Start.IsZero() && start != "") || (!p.Expiry.IsZero() && expiry != "") {
			return nil, authFailed("a field is set both in the SAS and in stored access policy %q", t.identifier)
		}
		if p.Permission != "" {
			if err := onlyLetters("policy permission", p.Permission, "raud"); err != nil {
				return nil, authFailed("%v", err)
			}
			perms = p.Permission
		}
		policyStart, policyExpiry = p.Start, p.Expiry
	}
	if perms == "" {
		return nil, authFailed("SAS grants no permissions (sp missing)")
	}

	now := a.now()
	st, se := policyStart, policyExpiry
	if start != "" {
		st, _ = parseSASTime(start) // validated by parseSAS
	}
	if expiry != "" {
		se, _ = parseSASTime(expiry)
	}
	if se.IsZero() {
		return nil, authFailed("SAS has no expiry (se)")
	}
	if !st.IsZero() && now.Before(st) {
		return nil, authFailed("SAS is not valid yet: start %s, current %s", st.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if now.After(se) {
		return nil, authFailed("SAS has expired: expiry %s, current %s", se.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}

	if t.ip != "" {
		rng, _ := parseIPRange(t.ip)
		ip, ok := remoteIP(r)
		if !ok || !rng.contains(ip) {
			return nil, fmt.Errorf("%w: source IP %s is outside sip %s", ErrAuthorizationSourceIPMismatch, r.RemoteAddr, t.ip)
		}
	}
	if t.protocol == ProtocolHTTPS && r.TLS == nil {
		return nil, fmt.Errorf("%w: the SAS allows https only and the request came over http", ErrAuthorizationProtocolMismatch)
	}

	p := &Principal{account: account, version: t.version, permissions: perms}
	if t.kind == sasService {
		p.kind = PrincipalServiceSAS
		p.table = strings.ToLower(t.table)
		p.keyRange = KeyRange{StartPartitionKey: t.spk, StartRowKey: t.srk, EndPartitionKey: t.epk, EndRowKey: t.erk}
	} else {
		p.kind = PrincipalAccountSAS
		p.services = t.services
		p.resourceTypes = t.resourceTypes
	}
	return p, nil
}

func remoteIP(r *http.Request) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	// Zones (fe80::1%eth0) cannot appear in sip; drop them before comparing.
	host, _, _ = strings.Cut(host, "%")
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// anyKeyMatches reports whether sig is the HMAC of sts under one of keys
// (an account's two keys are equally valid).
func anyKeyMatches(keys [][]byte, sts string, sig []byte) bool {
	return anyKeyMatchesBytes(keys, []byte(sts), sig)
}

func anyKeyMatchesBytes(keys [][]byte, sts, sig []byte) bool {
	for _, k := range keys {
		if m := macBytes(k, sts); hmac.Equal(m[:], sig) {
			return true
		}
	}
	return false
}
