// Package frontend owns the Azure Table REST API front-end: a stateless
// net/http server that authenticates requests (package auth), decodes and
// encodes OData JSON (internal/edm), parses $filter (internal/filter) and
// calls the cluster through a Backend (package router in production). It
// translates every error into Azure's error code and HTTP status in one
// table (errors.go).
//
// # Requests
//
// Server (server.go) is one http.Handler. For every request it sets
// x-ms-request-id (a random UUID), x-ms-version (the client's, else
// 2019-02-02), Date and x-ms-client-request-id (echoed); parses the path
// (route.go: path-style /<account>/… or host-style, see Config); negotiates
// the JSON metadata level (odata.go); authenticates with package auth
// (403 before anything else is revealed); then reports any routing error,
// authorizes the operation with auth.Principal.Authorize and calls the
// Backend under Config.RequestTimeout (or the smaller "timeout" query
// parameter). A recover turns a panic into 500 InternalError.
//
//	POST   /Tables                      Create Table (201, or 204 with Prefer: return-no-content)
//	GET    /Tables[()]                  Query Tables ($filter on TableName, $top, $select, NextTableName)
//	GET    /Tables('t')                 one table
//	DELETE /Tables('t')                 Delete Table (204)
//	POST   /t                           Insert Entity (201 with the entity, or 204)
//	GET    /t[()]                       Query Entities ($filter, $select, $top ≤ 1000, NextPartitionKey/NextRowKey)
//	GET    /t(PartitionKey='p',RowKey='r')     Get Entity (200 + ETag)
//	PUT    …(…)  If-Match: * | ETag     Update Entity; without If-Match Insert Or Replace (204 + ETag)
//	PATCH, MERGE, POST+X-HTTP-Method: MERGE
//	       …(…)                         Merge Entity; without If-Match Insert Or Merge (204 + ETag)
//	DELETE …(…)  If-Match required      Delete Entity (204)
//	POST   /$batch                      501 NotImplemented for now
//	/?restype=service…, ?comp=acl       501 NotImplemented for now (XML error on service endpoints)
//	OPTIONS                             403 CorsPreflightFailure (no CORS rules yet)
//
// Keys in entity URLs are OData string literals: quotes doubled, then
// percent-encoded (the delimiters may be encoded too); a '+' in the path is
// a plus. A malformed literal is 400 InvalidInput "Bad Request - Error in
// query syntax." and a missing or extra key 400 InvalidInput "The number of
// keys specified in the URI does not match number of key properties for the
// resource.", the service's answers. Keys in a body must equal the URL's
// (400 InvalidInput otherwise); absent ones are taken from the URL.
//
// Table names must match ^[A-Za-z][A-Za-z0-9]{2,62}$ for every operation:
// a bad length is 400 OutOfRangeInput, a bad character 400
// InvalidResourceName, as the service answers (both codes recorded by the
// Python SDK's error decoder). Creating "tables" is 400 InvalidInput.
//
// Continuation tokens have the service's shape, "1!<n>!<base64>" with '-'
// for padding, and are decoded leniently (any padding, URL-safe alphabet,
// a raw key). A service SAS with a key range sees queries clipped to it.
//
// Errors are mapped in one table in errors.go; bodies are
// {"odata.error":{"code":…,"message":{"lang":"en-US","value":"<msg>\nRequestId:<id>\nTime:<time>"}}}
// with the code also in x-ms-error-code.
package frontend
