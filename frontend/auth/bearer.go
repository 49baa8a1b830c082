package auth

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// SchemeBearer is the OAuth 2.0 scheme of Azure AD (Entra ID) tokens.
const SchemeBearer = "Bearer"

// storageAppID is Azure Storage's application id, a valid token audience.
const storageAppID = "e406a681-f3d4-42a8-90b6-c2b029497af1"

// tokenIssuers are the issuer prefixes of Azure AD's clouds (production,
// Germany, China, test); the tenant that follows is not checked.
var tokenIssuers = []string{
	"https://sts.windows.net/",
	"https://sts.microsoftonline.de/",
	"https://sts.chinacloudapi.cn/",
	"https://sts.windows-ppe.net",
	"https://login.microsoftonline.com/",
}

// tokenCloudSuffixes are the table endpoints of Azure's clouds: a token for
// https://<account>.table.<suffix> is for that account.
var tokenCloudSuffixes = []string{
	".table.core.windows.net",
	".table.core.chinacloudapi.cn",
	".table.core.usgovcloudapi.net",
	".table.core.cloudapi.de",
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || scheme != SchemeBearer {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

// tokenClaims are the JWT claims the basic level reads.
type tokenClaims struct {
	Audience  json.RawMessage `json:"aud"` // a string or a list of strings
	Issuer    string          `json:"iss"`
	NotBefore *float64        `json:"nbf"`
	Expires   *float64        `json:"exp"`
	IssuedAt  *float64        `json:"iat"`
}

func (c *tokenClaims) audiences() []string {
	var one string
	if json.Unmarshal(c.Audience, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(c.Audience, &many)
	return many
}

// verifyBearer checks a token at Azurite's "basic" OAuth level: the request
// came over HTTPS; the token is a JWT whose claims carry nbf, exp and iat
// with now inside [nbf, exp], an Azure AD issuer, and an audience that is
// Azure Storage's (https://storage.azure.com, its app id), the account's
// cloud endpoint (https://<account>.table.core.windows.net) or the account
// URL the request used. The signature is not checked: this is an emulator's
// check of well-formedness, not a proof of identity. A token failing a check
// is 401 InvalidAuthenticationInfo, as Azure answers bad tokens.
func (a *Authenticator) verifyBearer(r *http.Request, account, token string) (*Principal, error) {
	if r.TLS == nil {
		return nil, authFailed("authentication scheme Bearer is not allowed with HTTP")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, invalidToken("the token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return nil, invalidToken("the token's claims are not base64url")
	}
	var c tokenClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, invalidToken("the token's claims are not JSON")
	}
	if c.NotBefore == nil || c.Expires == nil || c.IssuedAt == nil {
		return nil, invalidToken("the token lacks nbf, exp or iat")
	}
	now := a.now()
	if now.Before(unixTime(*c.NotBefore)) {
		return nil, invalidToken("Lifetime validation failed. The token is not yet valid.")
	}
	if now.After(unixTime(*c.Expires)) {
		return nil, invalidToken("Lifetime validation failed. The token is expired.")
	}
	if !validIssuer(c.Issuer) {
		return nil, invalidToken("Issuer validation failed. Issuer %q is not Azure AD's", c.Issuer)
	}
	if !validAudience(c.audiences(), r, account) {
		return nil, invalidToken("Audience validation failed. Audience %q is not Azure Storage's nor account %s's", c.audiences(), account)
	}
	return &Principal{kind: PrincipalBearer, account: account, scheme: SchemeBearer}, nil
}

func unixTime(secs float64) time.Time {
	return time.Unix(0, int64(secs*float64(time.Second)))
}

func validIssuer(iss string) bool {
	for _, p := range tokenIssuers {
		if strings.HasPrefix(iss, p) {
			return true
		}
	}
	return false
}

func validAudience(auds []string, r *http.Request, account string) bool {
	for _, aud := range auds {
		trimmed := strings.TrimSuffix(aud, "/")
		switch trimmed {
		case "https://storage.azure.com", storageAppID,
			"https://" + r.Host + "/" + account, "https://" + r.Host:
			return true
		}
		if host, ok := strings.CutPrefix(trimmed, "https://"); ok {
			for _, suffix := range tokenCloudSuffixes {
				if name, ok := strings.CutSuffix(host, suffix); ok && name == account {
					return true
				}
			}
		}
	}
	return false
}

func invalidToken(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidAuthenticationInfo}, args...)...)
}
