package frontend

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend/auth"
	"tablestore/internal/edm"
	"tablestore/internal/filter"
	"tablestore/internal/rpcerr"
)

// This file is the single place where errors become Azure answers. Every
// source is mapped here, in this order (see classify):
//
//	source                                   Azure code                        status
//	*apiError (this package's parse errors)  its own code                       its own status
//	http.MaxBytesError (body over the cap)   RequestBodyTooLarge                413
//	frontend/auth (auth.ErrorCode)           AuthenticationFailed, Authorization* 403
//	internal/filter ErrSyntax, TooMany…      InvalidInput                       400
//	internal/filter ErrUnsupported           NotImplemented                     501
//	internal/edm sentinels (edm.AzureError)  InvalidInput, OutOfRangeInput, PropertyValueTooLarge,
//	                                         EntityTooLarge, TooManyProperties, PropertyNameInvalid,
//	                                         PropertyNameTooLong, PropertiesNeedValue,
//	                                         KeyValueTooLarge (400); ErrCorrupt → InternalError 500
//	rpcerr reason ENTITY_ALREADY_EXISTS      EntityAlreadyExists                409
//	              ENTITY_NOT_FOUND           ResourceNotFound                   404
//	              CONDITION_NOT_SATISFIED    UpdateConditionNotSatisfied        412
//	              TABLE_NOT_FOUND            TableNotFound                      404
//	              TABLE_ALREADY_EXISTS       TableAlreadyExists                 409
//	              TABLE_BEING_DELETED        TableBeingDeleted                  409
//	              INVALID_INPUT, FILTER_INVALID InvalidInput                    400
//	              INVALID_NAME               InvalidResourceName                400
//	              INVALID_ENTITY             metadata "code" (EntityTooLarge, …) 400
//	              SERVER_BUSY                ServerBusy + Retry-After           503
//	              NOT_LEADER, STALE_RANGE, UNAVAILABLE, RANGE_NOT_FOUND
//	                                         ServerBusy + Retry-After           503
//	                                         (the router retries these; reaching us means it gave up)
//	gRPC code DeadlineExceeded, Canceled     OperationTimedOut                  500
//	          Unavailable, ResourceExhausted ServerBusy + Retry-After           503
//	          NotFound                       ResourceNotFound                   404
//	          AlreadyExists                  ResourceAlreadyExists              409
//	          FailedPrecondition             UpdateConditionNotSatisfied        412
//	          InvalidArgument, OutOfRange    InvalidInput                       400
//	          Unimplemented                  NotImplemented                     501
//	anything else                            InternalError                      500

// apiError is an error this package decides on its own (URL, headers, query
// options): it carries its Azure answer.
type apiError struct {
	status int
	code   string
	msg    string // Azure's message, sent to the client
	detail string // for logs only
}

func (e *apiError) Error() string {
	if e.detail != "" {
		return e.code + ": " + e.detail
	}
	return e.code + ": " + e.msg
}

func newAPIError(status int, code, msg, detail string) *apiError {
	return &apiError{status: status, code: code, msg: msg, detail: detail}
}

// Azure's messages for the codes this package produces. They are the
// service's fixed strings (Table service and common REST error-code
// references; the spelling "specifed" is the service's own).
const (
	msgInvalidInput          = "One of the request inputs is not valid."
	msgQuerySyntax           = "Bad Request - Error in query syntax."
	msgKeyCount              = "The number of keys specified in the URI does not match number of key properties for the resource."
	msgInvalidResourceName   = "The specifed resource name contains invalid characters."
	msgResourceNameLength    = "The specified resource name length is not within the permissible limits."
	msgInvalidURI            = "The requested URI does not represent any resource on the server."
	msgMissingHeader         = "A required HTTP header was not specified."
	msgInvalidETag           = "The etag value '%s' specified in one of the request headers is not valid. Please make sure only one etag value is specified and is valid."
	msgMethodNotAllowed      = "The requested method is not allowed on the specified resource."
	msgXMethodNotUsingPost   = "The request uses X-HTTP-Method with an HTTP verb other than POST."
	msgXMethodIncorrectCount = "More than one X-HTTP-Method is specified."
	msgXMethodIncorrectValue = "The specified X-HTTP-Method is invalid."
	msgAtomNotSupported      = "Atom format is not supported."
	msgJSONNotSupported      = "JSON format is not supported."
	msgNotImplemented        = "The requested operation is not implemented on the specified resource."
	msgBodyTooLarge          = "The request body is too large and exceeds the maximum permissible limit."
	msgInvalidQueryParam     = "Value for one of the query parameters specified in the request URI is invalid."
	msgResourceNotFound      = "The specified resource does not exist."
	msgEntityExists          = "The specified entity already exists."
	msgConditionNotMet       = "The update condition specified in the request was not satisfied."
	msgTableNotFound         = "The table specified does not exist."
	msgTableExists           = "The table specified already exists."
	msgTableBeingDeleted     = "The specified table is being deleted. Try operation later."
	msgResourceExists        = "The specified resource already exists."
	msgServerBusy            = "The server is currently unable to receive requests. Please retry your request."
	msgOperationTimedOut     = "Operation could not be completed within the specified time."
	msgInternalError         = "Server encountered an internal error. Please try again after some time."
	msgAuthenticationFailed  = "Server failed to authenticate the request. Make sure the value of Authorization header is formed correctly including the signature."
	msgInvalidAuthInfo       = "Server failed to authenticate the request. Please refer to the information in the www-authenticate header."
	msgAuthorization         = "This request is not authorized to perform this operation."
	msgPermissionMismatch    = "This request is not authorized to perform this operation using this permission."
	msgResourceTypeMismatch  = "This request is not authorized to perform this operation using this resource type."
	msgServiceMismatch       = "This request is not authorized to perform this operation using this service."
	msgSourceIPMismatch      = "This request is not authorized to perform this operation using this source IP."
	msgProtocolMismatch      = "This request is not authorized to perform this operation using this protocol."
)

// edmMessages are Azure's messages for the edm sentinel codes.
var edmMessages = map[string]string{
	"InvalidInput":          msgInvalidInput,
	"OutOfRangeInput":       "One of the request inputs is out of range.",
	"PropertyValueTooLarge": "The property value exceeds the maximum allowed size (64KB). If the property value is a string, it is UTF-16 encoded and the maximum number of characters should be 32K or less.",
	"EntityTooLarge":        "The entity is larger than the maximum allowed size (1MB).",
	"TooManyProperties":     "The entity contains more properties than allowed. Each entity can include up to 252 properties to store data. Each entity also has 3 system properties.",
	"PropertyNameInvalid":   "The property name is invalid.",
	"PropertyNameTooLong":   "The property name exceeds the maximum allowed length (255).",
	"PropertiesNeedValue":   "The values are not specified for all properties in the entity.",
	"KeyValueTooLarge":      "The '%s' property exceeds the maximum allowed key size (2KB). If the property value is a string, it is UTF-16 encoded and the maximum number of characters should be 1K or less.",
	"InternalError":         msgInternalError,
}

var (
	errQuerySyntax      = newAPIError(http.StatusBadRequest, "InvalidInput", msgQuerySyntax, "")
	errKeyCount         = newAPIError(http.StatusBadRequest, "InvalidInput", msgKeyCount, "")
	errInvalidURI       = newAPIError(http.StatusBadRequest, "InvalidUri", msgInvalidURI, "")
	errMethodNotAllowed = newAPIError(http.StatusMethodNotAllowed, "MethodNotAllowed", msgMethodNotAllowed, "")
	errXMethodNotPost   = newAPIError(http.StatusBadRequest, "XMethodNotUsingPost", msgXMethodNotUsingPost, "")
	errXMethodCount     = newAPIError(http.StatusBadRequest, "XMethodIncorrectCount", msgXMethodIncorrectCount, "")
	errXMethodValue     = newAPIError(http.StatusBadRequest, "XMethodIncorrectValue", msgXMethodIncorrectValue, "")
	errAtomNotSupported = newAPIError(http.StatusUnsupportedMediaType, "AtomFormatNotSupported", msgAtomNotSupported, "")
	// JSON asked for or sent at an x-ms-version before 2013-08-15, which
	// speaks only Atom (see jsonFormatRefusal).
	errJSONNotSupported = newAPIError(http.StatusUnsupportedMediaType, "JsonFormatNotSupported", msgJSONNotSupported, "JSON at an x-ms-version before 2013-08-15")
	errMissingIfMatch   = newAPIError(http.StatusBadRequest, "MissingRequiredHeader", msgMissingHeader, "If-Match is required")
	// If-None-Match on an update (PUT, MERGE, PATCH) or a delete: the
	// messages the Table service error-code reference lists for
	// InvalidInput, WCF Data Services' own (its HandlePutOperation serves
	// PUT and MERGE alike, hence "PUT" for a merge too).
	errIfNoneMatchUpdate = newAPIError(http.StatusBadRequest, "InvalidInput", "If-None-Match HTTP header cannot be specified for PUT operations.", "")
	errIfNoneMatchDelete = newAPIError(http.StatusBadRequest, "InvalidInput", "If-None-Match HTTP header cannot be specified for DELETE operations.", "")
	errBodyTooLarge      = newAPIError(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", msgBodyTooLarge, "")
	// The read-access secondary is read-only; Azure refuses writes there with
	// 403 "Write operations are not allowed." (what AzCopy logs report).
	errSecondaryWrite    = newAPIError(http.StatusForbidden, "AuthorizationFailure", "Write operations are not allowed.", "write on the secondary endpoint")
	errTableNameReserved = newAPIError(http.StatusBadRequest, "InvalidInput", msgInvalidInput, `"tables" is a reserved table name`)
)

func errInvalidInput(detail string) *apiError {
	return newAPIError(http.StatusBadRequest, "InvalidInput", msgInvalidInput, detail)
}

func errInvalidQueryParam(name, value string) *apiError {
	return newAPIError(http.StatusBadRequest, "InvalidQueryParameterValue", msgInvalidQueryParam, name+"="+value)
}

func errInvalidETag(v string) *apiError {
	return newAPIError(http.StatusBadRequest, "InvalidInput", strings.Replace(msgInvalidETag, "%s", v, 1), "")
}

func errNotImplemented(detail string) *apiError {
	return newAPIError(http.StatusNotImplemented, "NotImplemented", msgNotImplemented, detail)
}

func errTableName(name string) *apiError {
	if len(name) < 3 || len(name) > 63 {
		return newAPIError(http.StatusBadRequest, "OutOfRangeInput", msgResourceNameLength, "table name "+strconv.Quote(name))
	}
	return newAPIError(http.StatusBadRequest, "InvalidResourceName", msgInvalidResourceName, "table name "+strconv.Quote(name))
}

// answer is what the client is told about an error.
type answer struct {
	status     int
	code       string
	msg        string
	retryAfter time.Duration // > 0: send Retry-After / x-ms-retry-after-ms
}

// classify maps err to its Azure answer; see the table at the top of the file.
func classify(err error) answer {
	var ae *apiError
	if errors.As(err, &ae) {
		return answer{status: ae.status, code: ae.code, msg: ae.msg}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return answer{status: errBodyTooLarge.status, code: errBodyTooLarge.code, msg: errBodyTooLarge.msg}
	}
	if code, ok := auth.ErrorCode(err); ok {
		if code == "InvalidAuthenticationInfo" {
			return answer{status: http.StatusUnauthorized, code: code, msg: msgInvalidAuthInfo}
		}
		return answer{status: http.StatusForbidden, code: code, msg: authMessage(code)}
	}
	switch {
	case errors.Is(err, filter.ErrUnsupported):
		return answer{status: http.StatusNotImplemented, code: "NotImplemented", msg: msgNotImplemented}
	case errors.Is(err, filter.ErrSyntax), errors.Is(err, filter.ErrTooManyComparisons):
		return answer{status: http.StatusBadRequest, code: "InvalidInput", msg: msgInvalidInput}
	}
	if code, status, ok := edm.AzureError(err); ok {
		msg := edmMessages[code]
		if msg == "" {
			msg = msgInvalidInput
		}
		if code == "KeyValueTooLarge" {
			key := "PartitionKey"
			if strings.HasPrefix(err.Error(), "RowKey") {
				key = "RowKey"
			}
			msg = strings.Replace(msg, "%s", key, 1)
		}
		return answer{status: status, code: code, msg: msg}
	}
	return classifyRPC(err)
}

// defaultRetryAfter is suggested with ServerBusy when the backend gave no hint.
const defaultRetryAfter = time.Second

func classifyRPC(err error) answer {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return answer{status: http.StatusInternalServerError, code: "OperationTimedOut", msg: msgOperationTimedOut}
	}
	info := rpcerr.Parse(err)
	busy := func() answer {
		ra := defaultRetryAfter
		if v, ok := info.Metadata[rpcerr.MetaRetryAfterMs]; ok {
			if ms, err := strconv.Atoi(v); err == nil && ms > 0 {
				ra = time.Duration(ms) * time.Millisecond
			}
		}
		return answer{status: http.StatusServiceUnavailable, code: "ServerBusy", msg: msgServerBusy, retryAfter: ra}
	}
	switch info.Reason {
	case rpcerr.ReasonEntityAlreadyExists:
		return answer{status: http.StatusConflict, code: "EntityAlreadyExists", msg: msgEntityExists}
	case rpcerr.ReasonEntityNotFound:
		return answer{status: http.StatusNotFound, code: "ResourceNotFound", msg: msgResourceNotFound}
	case rpcerr.ReasonConditionNotSatisfied:
		return answer{status: http.StatusPreconditionFailed, code: "UpdateConditionNotSatisfied", msg: msgConditionNotMet}
	case rpcerr.ReasonTableNotFound:
		return answer{status: http.StatusNotFound, code: "TableNotFound", msg: msgTableNotFound}
	case rpcerr.ReasonTableAlreadyExists:
		return answer{status: http.StatusConflict, code: "TableAlreadyExists", msg: msgTableExists}
	case rpcerr.ReasonTableBeingDeleted:
		return answer{status: http.StatusConflict, code: "TableBeingDeleted", msg: msgTableBeingDeleted}
	case rpcerr.ReasonInvalidInput, rpcerr.ReasonFilterInvalid:
		return answer{status: http.StatusBadRequest, code: "InvalidInput", msg: msgInvalidInput}
	case rpcerr.ReasonInvalidEntity:
		// A limit only the data could check (a merge that grew the entity
		// past 1 MiB); the server names the Azure code.
		code := info.Metadata[rpcerr.MetaAzureCode]
		msg, ok := edmMessages[code]
		if !ok || code == "InternalError" {
			code, msg = "InvalidInput", msgInvalidInput
		}
		msg = strings.Replace(msg, "%s", "PartitionKey", 1)
		return answer{status: http.StatusBadRequest, code: code, msg: msg}
	case rpcerr.ReasonInvalidName:
		return answer{status: http.StatusBadRequest, code: "InvalidResourceName", msg: msgInvalidResourceName}
	case rpcerr.ReasonServerBusy, rpcerr.ReasonNotLeader, rpcerr.ReasonStaleRange,
		rpcerr.ReasonUnavailable, rpcerr.ReasonRangeNotFound:
		if info.Code == codes.DeadlineExceeded {
			return answer{status: http.StatusInternalServerError, code: "OperationTimedOut", msg: msgOperationTimedOut}
		}
		return busy()
	}
	switch info.Code {
	case codes.DeadlineExceeded, codes.Canceled:
		return answer{status: http.StatusInternalServerError, code: "OperationTimedOut", msg: msgOperationTimedOut}
	case codes.Unavailable, codes.ResourceExhausted:
		return busy()
	case codes.NotFound:
		return answer{status: http.StatusNotFound, code: "ResourceNotFound", msg: msgResourceNotFound}
	case codes.AlreadyExists:
		return answer{status: http.StatusConflict, code: "ResourceAlreadyExists", msg: msgResourceExists}
	case codes.FailedPrecondition:
		return answer{status: http.StatusPreconditionFailed, code: "UpdateConditionNotSatisfied", msg: msgConditionNotMet}
	case codes.InvalidArgument, codes.OutOfRange:
		return answer{status: http.StatusBadRequest, code: "InvalidInput", msg: msgInvalidInput}
	case codes.Unimplemented:
		return answer{status: http.StatusNotImplemented, code: "NotImplemented", msg: msgNotImplemented}
	}
	return answer{status: http.StatusInternalServerError, code: "InternalError", msg: msgInternalError}
}

func authMessage(code string) string {
	switch code {
	case "AuthenticationFailed":
		return msgAuthenticationFailed
	case "AuthorizationPermissionMismatch":
		return msgPermissionMismatch
	case "AuthorizationResourceTypeMismatch":
		return msgResourceTypeMismatch
	case "AuthorizationServiceMismatch":
		return msgServiceMismatch
	case "AuthorizationSourceIPMismatch":
		return msgSourceIPMismatch
	case "AuthorizationProtocolMismatch":
		return msgProtocolMismatch
	}
	return msgAuthorization
}

// slowRequestWarn is how long a request must have run for its client's
// going away to be logged as a warning rather than at debug. A variable
// only so that tests can shorten it (slowrequest_test.go) instead of
// waiting out 5 s per case.
var slowRequestWarn = 5 * time.Second

// errorTimeLayout is the "Time:" line of Azure's error messages: always
// seven fraction digits.
const errorTimeLayout = "2006-01-02T15:04:05.0000000Z"

// writeError answers err the way Azure does: x-ms-error-code, an OData JSON
// error body (OData XML on the service and ACL endpoints and for Atom
// requests) whose message ends with the request id and time, and
// Retry-After for ServerBusy.
func (s *Server) writeError(w http.ResponseWriter, rc *reqCtx, err error) {
	a := classify(err)
	if rc.r != nil && rc.r.Context().Err() != nil && a.code == "OperationTimedOut" && errors.Is(rc.r.Context().Err(), context.Canceled) {
		// The client went away; nobody reads the answer. After a long
		// wait that is the service's failure all the same (an SDK try
		// timed out): say what it waited on (chaos seed 246's seven
		// tries of one page left no line here).
		if d := time.Since(rc.start); !rc.start.IsZero() && d >= slowRequestWarn {
			s.logger.Warn("client gave up on a slow request", "request_id", rc.id, "method", rc.method(), "path", rc.path(),
				"after", d.Round(time.Millisecond), "err", err)
		} else {
			s.logger.Debug("client canceled request", "request_id", rc.id, "err", err)
		}
	} else if a.status >= 500 {
		s.logger.Warn("request failed", "request_id", rc.id, "method", rc.method(), "path", rc.path(),
			"status", a.status, "code", a.code, "err", err)
	} else if s.logger.Enabled(context.Background(), slog.LevelDebug) {
		s.logger.Debug("request rejected", "request_id", rc.id, "method", rc.method(), "path", rc.path(),
			"status", a.status, "code", a.code, "err", err)
	}
	h := w.Header()
	h["X-Ms-Error-Code"] = []string{a.code}
	if a.retryAfter > 0 {
		secs := int64((a.retryAfter + time.Second - 1) / time.Second)
		h["Retry-After"] = []string{strconv.FormatInt(secs, 10)}
		h["X-Ms-Retry-After-Ms"] = []string{strconv.FormatInt(a.retryAfter.Milliseconds(), 10)}
	}
	if a.status == http.StatusUnauthorized {
		// What Azure sends with a refused bearer token: where to get one.
		h["Www-Authenticate"] = wwwAuthenticate
	}
	delete(h, "Etag")
	delete(h, "Location")
	delete(h, "Dataserviceid")
	delete(h, "Preference-Applied")
	buf := getBuf()
	defer putBuf(buf)
	b := buf.b[:0]
	msg := rc.msgPrefix + a.msg + "\nRequestId:" + rc.id + "\nTime:" + time.Now().UTC().Format(errorTimeLayout)
	switch {
	case rc.xmlErrors:
		// The service's answer on its XML endpoints (service properties,
		// stats, ACLs), as recorded by the Go SDK's tests: an OData XML
		// error with the m: prefix, Content-Type application/xml.
		h["Content-Type"] = contentTypeXML
		b = append(b, `<?xml version="1.0" encoding="utf-8"?><m:error xmlns:m="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"><m:code>`...)
		b = appendXMLEscaped(b, a.code)
		b = append(b, `</m:code><m:message xml:lang="en-US">`...)
		b = appendXMLEscaped(b, msg)
		b = append(b, "</m:message></m:error>"...)
	case a.code == errAtomNotSupported.code:
		// A client that asked for Atom reads XML: the service answers it
		// with an OData XML error in the default namespace (reported from
		// the service in azure-sdk-for-net issue 24126).
		h["Content-Type"] = contentTypeXMLUTF8
		b = append(b, `<?xml version="1.0" encoding="utf-8"?><error xmlns="http://schemas.microsoft.com/ado/2007/08/dataservices/metadata"><code>`...)
		b = appendXMLEscaped(b, a.code)
		b = append(b, `</code><message xml:lang="en-US">`...)
		b = appendXMLEscaped(b, msg)
		b = append(b, "</message></error>"...)
	default:
		h["Content-Type"] = contentTypeFor(rc.meta)
		b = append(b, `{"odata.error":{"code":`...)
		b = appendJSONString(b, a.code)
		b = append(b, `,"message":{"lang":"en-US","value":`...)
		b = appendJSONString(b, msg)
		b = append(b, "}}}"...)
	}
	buf.b = b
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(a.status)
	if rc.r == nil || rc.r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

func appendXMLEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '<':
			b = append(b, "&lt;"...)
		case '>':
			b = append(b, "&gt;"...)
		case '&':
			b = append(b, "&amp;"...)
		case '"':
			b = append(b, "&quot;"...)
		case '\'':
			b = append(b, "&apos;"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// ifNoneMatchRefusal answers If-None-Match on an entity write, alone or in
// a change set (whose operations are answered as they would be alone):
// Update and Merge Entity refuse it as PUT does, Delete Entity as DELETE.
func ifNoneMatchRefusal(h http.Header, del bool) error {
	switch {
	case len(h["If-None-Match"]) == 0:
		return nil
	case del:
		return errIfNoneMatchDelete
	}
	return errIfNoneMatchUpdate
}
