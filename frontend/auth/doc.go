// Package auth owns request authentication and authorization for the Azure
// Table REST front-end: verifying SharedKey / SharedKeyLite Authorization
// headers and service / account shared access signatures (SAS) against the
// keys of the account a request addresses (several accounts, two keys each),
// OAuth bearer tokens at Azurite's "basic" level, enforcing the SAS time window, source-IP and protocol
// restrictions, and deciding whether an authenticated Principal may perform a
// given operation (permissions, resource types, table name, key ranges).
//
// It also signs requests and produces SAS query parameters on the client side
// so tests and tools can talk to the server without an SDK.
//
// The package knows nothing about routing: the front-end parses the request
// into an Access (operation kind, table, keys) and maps the sentinel errors
// to Azure's 403 error codes with ErrorCode.
package auth
