package auth

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by Authenticate or Authorize wraps
// exactly one of them (ErrKeyOutOfRange additionally wraps
// ErrAuthorizationFailure), so callers can pick the Azure error code with
// errors.Is or ErrorCode. All of them are answered with HTTP 403 by Azure.
var (
	// ErrAuthenticationFailed: no credentials, a malformed header or SAS, a
	// signature that does not verify, an unknown account, a request date
	// outside the allowed skew, or a SAS outside its validity window.
	ErrAuthenticationFailed = errors.New("auth: authentication failed")

	// ErrInvalidAuthenticationInfo: an OAuth bearer token that is malformed,
	// expired, or for another audience or issuer. Azure answers it with 401
	// (the only error here that is not 403) and a WWW-Authenticate header.
	ErrInvalidAuthenticationInfo = errors.New("auth: invalid authentication info")

	// ErrAuthorizationFailure is Azure's catch-all for operations a SAS can
	// never grant (table create/delete/list or service properties with a
	// service SAS, ACL operations with any SAS, a table other than tn).
	ErrAuthorizationFailure = errors.New("auth: authorization failure")

	// ErrAuthorizationPermissionMismatch: the SAS lacks a permission letter
	// the operation needs.
	ErrAuthorizationPermissionMismatch = errors.New("auth: authorization permission mismatch")

	// ErrAuthorizationResourceTypeMismatch: an account SAS whose srt does not
	// cover the operation's level (service, table, entity).
	ErrAuthorizationResourceTypeMismatch = errors.New("auth: authorization resource type mismatch")

	// ErrAuthorizationServiceMismatch: an account SAS whose ss lacks "t".
	ErrAuthorizationServiceMismatch = errors.New("auth: authorization service mismatch")

	// ErrAuthorizationSourceIPMismatch: the client address is outside sip.
	ErrAuthorizationSourceIPMismatch = errors.New("auth: authorization source IP mismatch")

	// ErrAuthorizationProtocolMismatch: an https-only SAS used over http.
	ErrAuthorizationProtocolMismatch = errors.New("auth: authorization protocol mismatch")

	// ErrKeyOutOfRange: an entity key outside a service SAS key range. It
	// wraps ErrAuthorizationFailure; it is separate so the front-end can
	// treat reads differently (Azure filters queries to the range instead
	// of failing them).
	ErrKeyOutOfRange = fmt.Errorf("%w: entity key outside the SAS key range", ErrAuthorizationFailure)
)

// ErrorCode maps an error from this package to the x-ms-error-code Azure
// sends for it (status 403, but 401 for InvalidAuthenticationInfo). ok is false for errors that are not
// authentication or authorization failures, such as a failing PolicyLookup,
// which the front-end should answer as an internal error.
func ErrorCode(err error) (code string, ok bool) {
	// Most specific first: ErrKeyOutOfRange also matches ErrAuthorizationFailure.
	switch {
	case errors.Is(err, ErrAuthorizationSourceIPMismatch):
		return "AuthorizationSourceIPMismatch", true
	case errors.Is(err, ErrAuthorizationProtocolMismatch):
		return "AuthorizationProtocolMismatch", true
	case errors.Is(err, ErrAuthorizationServiceMismatch):
		return "AuthorizationServiceMismatch", true
	case errors.Is(err, ErrAuthorizationResourceTypeMismatch):
		return "AuthorizationResourceTypeMismatch", true
	case errors.Is(err, ErrAuthorizationPermissionMismatch):
		return "AuthorizationPermissionMismatch", true
	case errors.Is(err, ErrAuthorizationFailure):
		return "AuthorizationFailure", true
	case errors.Is(err, ErrAuthenticationFailed):
		return "AuthenticationFailed", true
	case errors.Is(err, ErrInvalidAuthenticationInfo):
		return "InvalidAuthenticationInfo", true
	}
	return "", false
}

func authFailed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrAuthenticationFailed}, args...)...)
}
