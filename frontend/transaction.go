package frontend

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"tablestore/frontend/auth"
	"tablestore/frontend/batch"
	"tablestore/internal/edm"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// MaxBatchBytes is Azure's limit on the body of an entity group
// transaction; a larger body is refused whole with 413 RequestBodyTooLarge
// ("The request body is too large and exceeds the maximum permissible
// limit.", what SDK users report from the service).
const MaxBatchBytes = 4 << 20

// Azure's answers to broken transaction rules. Each is sent as the single
// sub-response of a 202, its message prefixed with the failing operation's
// index, as recorded from the service (CloudStub's service-checked tests,
// Azurite's notes validated against the service).
var (
	errBatchTooManyOps = newAPIError(http.StatusBadRequest, "InvalidInput",
		"The batch request operation exceeds the maximum 100 changes per change set.", "")
	errBatchPartitions = newAPIError(http.StatusBadRequest, "CommandsInBatchActOnDifferentPartitions",
		"All commands in a batch must operate on same entity group.", "")
	errBatchDuplicate = newAPIError(http.StatusBadRequest, "InvalidDuplicateRow",
		"The batch request contains multiple changes with same row key. An entity can appear only once in a batch request.", "")
	errBatchQueryNotAlone = newAPIError(http.StatusBadRequest, "InvalidInput", msgInvalidInput,
		"a query must be the only operation of a batch")
)

// Sub-response header values, shared.
var (
	dataServiceVersion1 = "1.0;"
	dataServiceVersion3 = "3.0;"
)

// txnOp is one parsed write operation of a change set.
type txnOp struct {
	rt     route
	op     *pb.EntityOp
	access auth.AccessKind
	entity *edm.Entity // inserts: answered with the entity unless Prefer says no
	meta   edm.Metadata
	pref   preference
	// contentID is the operation's Content-ID header, echoed first in its
	// sub-response (see contentIDHeader).
	contentID string
}

// submitTransaction is Entity Group Transaction: POST /$batch.
//
// The whole body is read and parsed first; each operation is then parsed,
// validated and authorized in order, and the first one that fails is
// answered as Azure does: 202 with a single sub-response naming its index.
// Only when every operation is acceptable is the backend called, once, with
// all of them: one Raft command, applied atomically by the partition
// server, which reports the index of an operation that fails against the
// stored data. Nothing is applied on any failure.
func (s *Server) submitTransaction(ctx context.Context, w http.ResponseWriter, rc *reqCtx) error {
	buf, err := s.readBody(rc)
	if err != nil {
		return err
	}
	defer putBuf(buf)
	if len(buf.b) > MaxBatchBytes {
		return newAPIError(errBodyTooLarge.status, errBodyTooLarge.code, errBodyTooLarge.msg,
			"batch body of "+strconv.Itoa(len(buf.b))+" bytes, the limit is 4 MiB")
	}
	ct := ""
	if v := rc.r.Header["Content-Type"]; len(v) > 0 {
		ct = v[0]
	}
	b, err := batch.Parse(ct, buf.b)
	if err != nil {
		if errors.Is(err, batch.ErrTooManyOperations) {
			return s.writeTxnFailure(w, rc, 0, edm.MinimalMetadata, preferNone, "", errBatchTooManyOps)
		}
		return errInvalidInput(err.Error())
	}
	if len(b.Requests) == 1 && b.Requests[0].Method == http.MethodGet {
		return s.batchQuery(ctx, w, rc, &b.Requests[0])
	}

	ops := make([]*pb.EntityOp, 0, len(b.Requests))
	txn := make([]txnOp, 0, len(b.Requests))
	var table, pk string
	rows := make(map[string]struct{}, len(b.Requests))
	var formats queryFormats
	for i := range b.Requests {
		t, err := s.parseTxnOp(rc, &b.Requests[i], &formats)
		if err != nil {
			return s.writeTxnFailure(w, rc, i, t.meta, t.pref, t.contentID, err)
		}
		if i == 0 {
			table, pk = t.rt.table, t.op.PartitionKey
		} else if !strings.EqualFold(t.rt.table, table) || t.op.PartitionKey != pk {
			return s.writeTxnFailure(w, rc, i, t.meta, t.pref, t.contentID, errBatchPartitions)
		}
		if _, dup := rows[t.op.RowKey]; dup {
			return s.writeTxnFailure(w, rc, i, t.meta, t.pref, t.contentID, errBatchDuplicate)
		}
		rows[t.op.RowKey] = struct{}{}
		if err := rc.principal.Authorize(auth.Access{Kind: t.access, Table: t.rt.table, PartitionKey: t.op.PartitionKey, RowKey: t.op.RowKey}); err != nil {
			return s.writeTxnFailure(w, rc, i, t.meta, t.pref, t.contentID, err)
		}
		ops = append(ops, t.op)
		txn = append(txn, t)
	}

	ts, err := s.backend.Write(ctx, s.tableID(rc.account, table), pk, ops)
	if err != nil {
		// A server-side failure is answered as the whole request's (so
		// SDK retry policies see the 500 or 503), even when the partition
		// server named an operation: a range still frozen or stale when
		// the router's budget ran out fails at its first operation's key
		// check, which is no fault of that operation (a 202 would end the
		// client's retries).
		if classify(err).status >= 500 {
			return err
		}
		i := rpcerr.Parse(err).Index()
		if i < 0 || i >= len(txn) {
			// Not an operation's fault: pinned on the first operation, as
			// the service does for a missing table ("0:The table specified
			// does not exist.").
			i = 0
		}
		return s.writeTxnFailure(w, rc, i, txn[i].meta, txn[i].pref, txn[i].contentID, err)
	}
	return s.writeTxnSuccess(w, rc, txn, ts)
}

// queryFormats remembers the $format of the last query string a change
// set's operations carried: the SDKs repeat the same one on every
// operation, and parsing it was a fifth of reading an insert's part.
type queryFormats struct {
	raw, value string
}

// format is the $format parameter of rawQuery.
func (f *queryFormats) format(rawQuery string) string {
	if rawQuery == "" {
		return ""
	}
	if rawQuery != f.raw {
		q, _ := url.ParseQuery(strings.ReplaceAll(rawQuery, ";", "%3B"))
		f.raw, f.value = rawQuery, q.Get("$format")
	}
	return f.value
}

// parseTxnOp turns one sub-request of a change set into an operation. The
// returned txnOp carries the metadata level and preference even on error,
// for the failure sub-response.
func (s *Server) parseTxnOp(rc *reqCtx, sub *batch.Request, formats *queryFormats) (txnOp, error) {
	var t txnOp
	p, rawQuery := subRequestPath(rc, sub.Target)
	t.meta, _ = negotiate(formats.format(rawQuery), sub.Header["Accept"])
	t.pref = preferValues(sub.Header["Prefer"])
	if v := sub.Header["Content-Id"]; len(v) > 0 {
		t.contentID = v[0]
	}
	method := sub.Method
	if x := sub.Header["X-Http-Method"]; len(x) > 0 {
		if len(x) > 1 {
			return t, errXMethodCount
		}
		if method != http.MethodPost {
			return t, errXMethodNotPost
		}
		switch x[0] {
		case "MERGE", "PUT", "DELETE", "PATCH":
			method = x[0]
		default:
			return t, errXMethodValue
		}
	}
	rt, err := parseRoute(p, false)
	alt, altOK := lenientEntityRoute(p)
	if err != nil {
		if !altOK {
			return t, err
		}
		rt, err = alt, nil
	}
	t.rt = rt

	switch {
	case rt.kind == routeEntitySet && method == http.MethodPost:
		// One decode gives the entity and its stored form, as Insert
		// Entity's does (the entity's strings then live in bin).
		e, bin, hasPK, hasRK, err := edm.DecodeJSONKeysBinary(sub.Body)
		if err != nil {
			return t, err
		}
		if e, err = checkEntity(e, hasPK, hasRK, nil); err != nil { // changes nothing of e: bin still encodes it
			return t, err
		}
		t.entity, t.access = e, auth.EntityAdd
		t.op = &pb.EntityOp{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: e.PartitionKey, RowKey: e.RowKey, Entity: bin}
		return t, nil
	case rt.kind != routeEntity:
		if method == http.MethodGet {
			return t, errBatchQueryNotAlone
		}
		if rt.kind == routeEntitySet || rt.kind == routeTables || rt.kind == routeTable {
			return t, errMethodNotAllowed
		}
		return t, errInvalidURI
	}

	op := &pb.EntityOp{}
	conditional, err := ifMatchValues(sub.Header["If-Match"], op)
	if err != nil {
		return t, err
	}
	switch method {
	case http.MethodDelete:
		if !conditional {
			return t, errMissingIfMatch
		}
		if err := ifNoneMatchRefusal(sub.Header, true); err != nil {
			return t, err
		}
		op.Kind, t.access = pb.OpKind_OP_KIND_DELETE, auth.EntityDelete
	case http.MethodPut, http.MethodPatch, "MERGE":
		if err := ifNoneMatchRefusal(sub.Header, false); err != nil {
			return t, err
		}
		merge := method != http.MethodPut
		t.access = auth.EntityUpsert
		switch {
		case merge && conditional:
			op.Kind, t.access = pb.OpKind_OP_KIND_MERGE, auth.EntityUpdate
		case merge:
			op.Kind = pb.OpKind_OP_KIND_INSERT_OR_MERGE
		case conditional:
			op.Kind, t.access = pb.OpKind_OP_KIND_REPLACE, auth.EntityUpdate
		default:
			op.Kind = pb.OpKind_OP_KIND_INSERT_OR_REPLACE
		}
		e, hasPK, hasRK, err := edm.DecodeJSONKeys(sub.Body)
		if err != nil {
			return t, err
		}
		// The Go SDK leaves quotes in keys undoubled in change set URLs;
		// when the body names the entity, it decides between the readings.
		if altOK && hasPK && hasRK && (e.PartitionKey != rt.pk || e.RowKey != rt.rk) &&
			e.PartitionKey == alt.pk && e.RowKey == alt.rk {
			rt = alt
			t.rt = rt
		}
		if e, err = checkEntity(e, hasPK, hasRK, &rt); err != nil {
			return t, err
		}
		op.Entity = edm.MarshalBinary(e)
	case http.MethodGet:
		return t, errBatchQueryNotAlone
	default:
		return t, errMethodNotAllowed
	}
	if err := validateURLKey("PartitionKey", rt.pk); err != nil {
		return t, err
	}
	if err := validateURLKey("RowKey", rt.rk); err != nil {
		return t, err
	}
	op.PartitionKey, op.RowKey = rt.pk, rt.rk
	t.op = op
	return t, nil
}

// subRequestPath returns the escaped resource path of a sub-request target
// (after the account, as resourcePath does for the outer request) and its
// raw query. Targets are absolute URLs (what the SDKs write) or paths.
func subRequestPath(rc *reqCtx, target string) (path, rawQuery string) {
	if i := strings.Index(target, "://"); i >= 0 {
		rest := target[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			target = rest[j:]
		} else {
			target = "/"
		}
	}
	path, rawQuery, _ = strings.Cut(target, "?")
	for _, acct := range [...]string{rc.account, rc.account + secondarySuffix} {
		if strings.HasPrefix(path, "/"+acct) && (len(path) == 1+len(acct) || path[1+len(acct)] == '/') {
			return path[1+len(acct):], rawQuery
		}
	}
	return path, rawQuery
}

// lenientEntityRoute reads an entity path whose keys may hold undoubled
// single quotes ("tbl(PartitionKey='p'1',RowKey='r')"), as the Go SDK
// writes them in change sets: the key values are whatever lies between
// "PartitionKey='" and "',RowKey='" (either order) and the final quote.
// ok is false unless that split is unambiguous.
func lenientEntityRoute(p string) (route, bool) {
	if len(p) < 2 || p[0] != '/' {
		return route{}, false
	}
	name, inner, hasParens, err := splitSegment(p[1:])
	if err != nil || !hasParens {
		return route{}, false
	}
	if name, err = unescape(name); err != nil || validateTableName(name) != nil {
		return route{}, false
	}
	if inner, err = unescape(inner); err != nil {
		return route{}, false
	}
	for _, order := range [2][2]string{{"PartitionKey", "RowKey"}, {"RowKey", "PartitionKey"}} {
		body, ok := strings.CutPrefix(inner, order[0]+"='")
		if !ok {
			continue
		}
		body, ok = strings.CutSuffix(body, "'")
		if !ok {
			continue
		}
		sep := "'," + order[1] + "='"
		if strings.Count(body, sep) != 1 {
			return route{}, false
		}
		a, b, _ := strings.Cut(body, sep)
		if order[0] == "RowKey" {
			a, b = b, a
		}
		return route{kind: routeEntity, table: name, pk: a, rk: b}, true
	}
	return route{}, false
}

// writeTxnFailure answers a failed transaction: 202 with one sub-response
// carrying the error, its message prefixed with "<index>:", and the failing
// operation's Content-ID when it sent one.
func (s *Server) writeTxnFailure(w http.ResponseWriter, rc *reqCtx, index int, meta edm.Metadata, pref preference, contentID string, err error) error {
	a := classify(err)
	s.logger.Debug("transaction rejected", "request_id", rc.id, "index", index, "status", a.status, "code", a.code, "err", err)
	buf := getBuf()
	defer putBuf(buf)
	body := make([]byte, 0, 256)
	body = append(body, `{"odata.error":{"code":`...)
	body = appendJSONString(body, a.code)
	body = append(body, `,"message":{"lang":"en-US","value":`...)
	body = appendJSONString(body, strconv.Itoa(index)+":"+a.msg+"\nRequestId:"+rc.id+"\nTime:"+time.Now().UTC().Format(errorTimeLayout))
	body = append(body, "}}}"...)
	hdr := make([]batch.Header, 0, 6)
	hdr = appendContentID(hdr, contentID)
	hdr = append(hdr, batch.Header{Name: "X-Content-Type-Options", Value: "nosniff"}, batch.Header{Name: "Cache-Control", Value: "no-cache"})
	if pref == preferNoContent {
		hdr = append(hdr, batch.Header{Name: "Preference-Applied", Value: "return-no-content"})
	}
	hdr = append(hdr,
		batch.Header{Name: "DataServiceVersion", Value: dataServiceVersion3},
		batch.Header{Name: "Content-Type", Value: contentTypeFor(meta)[0]})
	boundary, cs := "batchresponse_"+newRequestID(), "changesetresponse_"+newRequestID()
	buf.b = batch.AppendResponse(buf.b[:0], boundary, cs, []batch.Response{{Status: a.status, Header: hdr, Body: body}})
	s.writeBatchBody(w, rc, boundary, buf.b)
	return nil
}

// writeTxnSuccess answers an applied transaction: one sub-response per
// operation, all with the transaction's ETag.
func (s *Server) writeTxnSuccess(w http.ResponseWriter, rc *reqCtx, txn []txnOp, ts time.Time) error {
	etag := edm.FormatETag(ts)
	base := s.baseURL(rc)
	resps := make([]batch.Response, len(txn))
	for i := range txn {
		t := &txn[i]
		r := &resps[i]
		r.Header = make([]batch.Header, 0, 9)
		r.Header = appendContentID(r.Header, t.contentID)
		r.Header = append(r.Header, batch.Header{Name: "X-Content-Type-Options", Value: "nosniff"}, batch.Header{Name: "Cache-Control", Value: "no-cache"})
		switch t.op.Kind {
		case pb.OpKind_OP_KIND_INSERT:
			loc := string(appendEntityPath([]byte(base+"/"), t.rt.table, t.op.PartitionKey, t.op.RowKey))
			if t.pref == preferNoContent {
				r.Status = http.StatusNoContent
				r.Header = append(r.Header,
					batch.Header{Name: "Preference-Applied", Value: "return-no-content"},
					batch.Header{Name: "DataServiceVersion", Value: dataServiceVersion3})
			} else {
				r.Status = http.StatusCreated
				if t.pref == preferContent {
					r.Header = append(r.Header, batch.Header{Name: "Preference-Applied", Value: "return-content"})
				}
				r.Header = append(r.Header,
					batch.Header{Name: "DataServiceVersion", Value: dataServiceVersion3},
					batch.Header{Name: "Content-Type", Value: contentTypeFor(t.meta)[0]})
				t.entity.Timestamp = ts
				sub := &reqCtx{r: rc.r, meta: t.meta, hostStyle: rc.hostStyle, account: rc.account, base: base}
				r.Body = edm.AppendJSON(nil, t.entity, s.encodeOptions(sub, t.rt.table, true, nil))
			}
			r.Header = append(r.Header,
				batch.Header{Name: "Location", Value: loc},
				batch.Header{Name: "DataServiceId", Value: loc},
				batch.Header{Name: "ETag", Value: etag})
		case pb.OpKind_OP_KIND_DELETE:
			r.Status = http.StatusNoContent
			r.Header = append(r.Header, batch.Header{Name: "DataServiceVersion", Value: dataServiceVersion1})
		default:
			r.Status = http.StatusNoContent
			r.Header = append(r.Header,
				batch.Header{Name: "DataServiceVersion", Value: dataServiceVersion1},
				batch.Header{Name: "ETag", Value: etag})
		}
	}
	buf := getBuf()
	defer putBuf(buf)
	boundary, cs := "batchresponse_"+newRequestID(), "changesetresponse_"+newRequestID()
	buf.b = batch.AppendResponse(buf.b[:0], boundary, cs, resps)
	s.writeBatchBody(w, rc, boundary, buf.b)
	return nil
}

// appendContentID appends the Content-ID echo of an operation that sent
// one. The service answers an operation's Content-ID (sent among the
// operation's own headers, as the .NET storage SDKs do) with the same
// header right after the status line: "HTTP/1.1 204 No Content\r\nContent-ID:
// 0\r\nX-Content-Type-Options: nosniff…", as azure-table-node's tests
// recorded it; operations without one get none.
func appendContentID(hdr []batch.Header, contentID string) []batch.Header {
	if contentID == "" {
		return hdr
	}
	return append(hdr, batch.Header{Name: "Content-ID", Value: contentID})
}

func (s *Server) writeBatchBody(w http.ResponseWriter, rc *reqCtx, boundary string, body []byte) {
	h := w.Header()
	h["Content-Type"] = []string{batch.ContentType(boundary)}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	rc.wrote = true
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(body)
}

// batchQuery runs the single query of a query batch through the ordinary
// read handlers and wraps their answer as the batch's only sub-response.
func (s *Server) batchQuery(ctx context.Context, w http.ResponseWriter, rc *reqCtx, sub *batch.Request) error {
	p, rawQuery := subRequestPath(rc, sub.Target)
	u := &url.URL{RawPath: p, RawQuery: rawQuery}
	if dec, err := url.PathUnescape(p); err == nil {
		u.Path = dec
	}
	r := (&http.Request{Method: http.MethodGet, URL: u, Header: sub.Header, Host: rc.r.Host, TLS: rc.r.TLS, RemoteAddr: rc.r.RemoteAddr}).WithContext(ctx)
	// A failing query is the batch's operation 0, and its message says so
	// like every other batch failure ("0:The specified resource does not exist.").
	src := &reqCtx{r: r, id: rc.id, hostStyle: rc.hostStyle, account: rc.account, secondary: rc.secondary,
		principal: rc.principal, base: rc.base, msgPrefix: "0:", start: rc.start}
	bw := &bufferedWriter{h: http.Header{}}
	err := func() error {
		if rawQuery != "" {
			q, err := url.ParseQuery(strings.ReplaceAll(rawQuery, ";", "%3B"))
			if err != nil {
				return errInvalidQueryParam("query", rawQuery)
			}
			src.query = q
		}
		var err error
		if src.meta, err = negotiate(src.q("$format"), sub.Header["Accept"]); err != nil {
			return err
		}
		rt, err := parseRoute(p, false)
		if err != nil {
			return err
		}
		switch rt.kind {
		case routeEntity:
			if err := validateURLKey("PartitionKey", rt.pk); err != nil {
				return err
			}
			if err := validateURLKey("RowKey", rt.rk); err != nil {
				return err
			}
			return s.getEntity(ctx, bw, src, rt)
		case routeEntitySet:
			return s.queryEntities(ctx, bw, src, rt.table)
		case routeTables:
			return s.queryTables(ctx, bw, src, "")
		case routeTable:
			return s.queryTables(ctx, bw, src, rt.table)
		}
		return errInvalidURI
	}()
	if err != nil && !src.wrote {
		if classify(err).status >= 500 {
			// A server-side failure is the whole request's, as in a
			// change set: SDK retry policies see the 500 or 503 (in a
			// 202 they would not).
			return err
		}
		src.wrote = true
		s.writeError(bw, src, err)
	}
	resp := batch.Response{Status: bw.status, Body: bw.body}
	resp.Header = append(resp.Header, batch.Header{Name: "X-Content-Type-Options", Value: "nosniff"}, batch.Header{Name: "Cache-Control", Value: "no-cache"})
	if ct := bw.h["Content-Type"]; len(ct) > 0 && strings.HasPrefix(ct[0], "application/json") {
		// Sub-responses carry DataServiceVersion (the service's recorded
		// batch bytes); top-level responses do not.
		resp.Header = append(resp.Header, batch.Header{Name: "DataServiceVersion", Value: dataServiceVersion3})
	}
	for _, k := range [...][2]string{
		{"Content-Type", "Content-Type"}, {"Etag", "ETag"},
		{"X-Ms-Continuation-Nextpartitionkey", "x-ms-continuation-NextPartitionKey"},
		{"X-Ms-Continuation-Nextrowkey", "x-ms-continuation-NextRowKey"},
		{"X-Ms-Continuation-Nexttablename", "x-ms-continuation-NextTableName"},
	} {
		if v := bw.h[k[0]]; len(v) > 0 {
			resp.Header = append(resp.Header, batch.Header{Name: k[1], Value: v[0]})
		}
	}
	buf := getBuf()
	defer putBuf(buf)
	boundary := "batchresponse_" + newRequestID()
	buf.b = batch.AppendQueryResponse(buf.b[:0], boundary, &resp)
	s.writeBatchBody(w, rc, boundary, buf.b)
	return nil
}

// bufferedWriter collects a response in memory (the sub-response of a
// query batch).
type bufferedWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (b *bufferedWriter) Header() http.Header { return b.h }

func (b *bufferedWriter) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	b.body = append(b.body, p...)
	return len(p), nil
}
