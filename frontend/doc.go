// Package frontend owns the Azure Table REST API front-end: a stateless
// http.Handler, served by package http1, that authenticates requests (package auth), decodes and
// encodes OData JSON (internal/edm), parses $filter (internal/filter) and
// calls the cluster through a Backend (package router in production). It
// translates every error into Azure's error code and HTTP status in one
// table (errors.go).
//
// # Requests
//
// Server (server.go) is one http.Handler. For every request it sets
// x-ms-request-id (a random UUID), x-ms-version (the client's, else a SAS's
// sv, else 2019-02-02), Date and x-ms-client-request-id (echoed); parses the path
// (route.go: path-style /<account>/… or host-style, see Config); negotiates
// the JSON metadata level (odata.go); answers an OPTIONS preflight from the
// addressed account's CORS rules without authentication (cors.go); wraps
// the writer when that account's CORS rules apply to the request (every
// account has its own service properties, service.go: propsKey);
// authenticates with package
// auth (403 before anything else is revealed); then reports any routing
// error, authorizes the operation with auth.Principal.Authorize and calls
// the Backend under Config.RequestTimeout (or the smaller "timeout" query
// parameter; the listener's requests carry the first as their context's
// deadline already, from http1, counted from their header). A recover turns a panic into 500 InternalError. An
// x-ms-version outside the published versions is 400 InvalidHeaderValue
// before authentication (version.go).
//
// # Accounts, endpoints and Azurite's switches
//
// The accounts served come from the master's registry when it has one,
// else from Config (accounts.go); tables of accounts other than
// Config.AccountName are namespaced "<account>/<table>" in the cluster.
// /<account>-secondary/ is the read-only secondary, its reads served by
// range followers (secondary.go). HTTPS (tls.go), OAuth bearer tokens
// (auth/bearer.go) and the other Azurite switches are Config settings.
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
//	POST   /$batch                      Entity Group Transaction (202 multipart/mixed; transaction.go)
//	GET|PUT /t?comp=acl                 Get (200) / Set (204) Table ACL, XML (acl.go)
//	GET|PUT /?restype=service&comp=properties
//	                                    Get (200) / Set (202) Table Service Properties, XML (service.go)
//	GET    /?restype=service&comp=stats Get Table Service Stats (200), XML
//	OPTIONS any                         CORS preflight (200 or 403 CorsPreflightFailure)
//
// Entity group transactions (transaction.go, wire format in package batch)
// are checked operation by operation in order: at most 100 (else
// "0:The batch request operation exceeds the maximum 100 changes per change
// set."), one table and PartitionKey (CommandsInBatchActOnDifferentPartitions
// at the first operation that differs), each RowKey once
// (InvalidDuplicateRow at the repeat), a query only alone, every body
// decoded and validated, every operation authorized (a service SAS key
// range applies to each). The first failure is the 202 response's single
// sub-response, its message prefixed with "<index>:". Then Backend.Write is
// called once with every operation (one Raft command, all or nothing); an
// error carrying an operation index (rpcerr.Info.Index) is reported the
// same way, an unindexed 5xx (busy, timeout) as the whole request's error
// so that SDK retry policies see it. A body over 4 MiB is 413
// RequestBodyTooLarge; a malformed body 400 InvalidInput.
//
// The service and ACL endpoints answer errors as the service does there,
// an OData XML error (<m:error><m:code>…</m:code><m:message>…); a request
// that asks for Atom gets 415 AtomFormatNotSupported as an XML <error>.
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
// a raw key). A service SAS with a key range sees queries clipped to it;
// its point reads and writes outside the range are 403. A service SAS
// naming a stored access policy (si) is resolved against the table's ACL
// (policyLookup in acl.go).
//
// Errors are mapped in one table in errors.go; bodies are
// {"odata.error":{"code":…,"message":{"lang":"en-US","value":"<msg>\nRequestId:<id>\nTime:<time>"}}}
// with the code also in x-ms-error-code (XML on the service and ACL
// endpoints, see above).
package frontend
