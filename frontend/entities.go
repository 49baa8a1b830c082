package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"tablestore/frontend/auth"
	"tablestore/internal/edm"
	"tablestore/internal/filter"
	pb "tablestore/proto/tablestorepb"
)

// readBody reads the request body into a pooled buffer, refusing more than
// Config.MaxBodyBytes with 413 RequestBodyTooLarge. The caller releases the
// buffer with putBuf.
func (s *Server) readBody(rc *reqCtx) (*byteBuf, error) {
	r := rc.r
	max := s.cfg.MaxBodyBytes
	if r.ContentLength > max {
		return nil, errBodyTooLarge
	}
	buf := getBuf()
	b := buf.b[:0]
	if r.ContentLength > 0 && int64(cap(b)) < r.ContentLength {
		b = make([]byte, 0, r.ContentLength)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > max {
			buf.b = b
			putBuf(buf)
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			buf.b = b
			putBuf(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				// The listener reads a body by the request's deadline
				// (http1.Server.RequestTimeout): the request ran out of
				// time, as one whose back-end work did (500
				// OperationTimedOut, which clients retry).
				return nil, fmt.Errorf("reading body: %w", context.DeadlineExceeded)
			}
			return nil, errInvalidInput("reading body: " + err.Error())
		}
	}
	buf.b = b
	return buf, nil
}

// decodeEntity reads and decodes the entity in the body, checking it
// against Azure's limits. urlKeys is set for operations addressed by key:
// keys missing from the body are taken from the URL and keys present must
// match it (an entity cannot be renamed by Update or Merge).
func (s *Server) decodeEntity(rc *reqCtx, rt *route) (*edm.Entity, error) {
	buf, err := s.readBody(rc)
	if err != nil {
		return nil, err
	}
	e, hasPK, hasRK, err := edm.DecodeJSONKeys(buf.b)
	putBuf(buf) // the decoded entity never aliases the buffer
	if err != nil {
		return nil, err
	}
	return checkEntity(e, hasPK, hasRK, rt)
}

// decodeInsert is decodeEntity for an insert, which also needs the
// entity's binary form: both come from edm.DecodeJSONKeysBinary, the
// entity's strings pointing into the binary form.
func (s *Server) decodeInsert(rc *reqCtx) (*edm.Entity, []byte, error) {
	buf, err := s.readBody(rc)
	if err != nil {
		return nil, nil, err
	}
	e, bin, hasPK, hasRK, err := edm.DecodeJSONKeysBinary(buf.b)
	putBuf(buf) // neither the entity nor bin aliases the buffer
	if err != nil {
		return nil, nil, err
	}
	if e, err = checkEntity(e, hasPK, hasRK, nil); err != nil { // changes nothing of e: bin still encodes it
		return nil, nil, err
	}
	return e, bin, nil
}

// checkEntity applies the key rules of decodeEntity to a decoded body and
// validates the entity against Azure's limits.
func checkEntity(e *edm.Entity, hasPK, hasRK bool, rt *route) (*edm.Entity, error) {
	if rt != nil {
		if hasPK && e.PartitionKey != rt.pk {
			return nil, errInvalidInput("body PartitionKey " + strconv.Quote(e.PartitionKey) + " differs from the URL's " + strconv.Quote(rt.pk))
		}
		if hasRK && e.RowKey != rt.rk {
			return nil, errInvalidInput("body RowKey " + strconv.Quote(e.RowKey) + " differs from the URL's " + strconv.Quote(rt.rk))
		}
		e.PartitionKey, e.RowKey = rt.pk, rt.rk
	} else if !hasPK || !hasRK {
		return nil, newAPIError(http.StatusBadRequest, "PropertiesNeedValue", edmMessages["PropertiesNeedValue"], "the body lacks PartitionKey or RowKey")
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return e, nil
}

// insertEntity is Insert Entity: POST /t with the entity.
func (s *Server) insertEntity(ctx context.Context, w http.ResponseWriter, rc *reqCtx, table string) error {
	e, bin, err := s.decodeInsert(rc)
	if err != nil {
		return err
	}
	if err := rc.principal.Authorize(auth.Access{Kind: auth.EntityAdd, Table: table, PartitionKey: e.PartitionKey, RowKey: e.RowKey}); err != nil {
		return err
	}
	// The op owns its bytes, never a pooled buffer: a handler that
	// returns when its client goes away leaves the op queued (a write
	// lane, the in-process server's batcher), and a buffer back in the
	// pool would be refilled with another request's entity before the op
	// is sent (review of session 10).
	ops := new(insertOps) // the op and its one-element list in one allocation
	ops.op.Kind = pb.OpKind_OP_KIND_INSERT
	ops.op.PartitionKey, ops.op.RowKey = e.PartitionKey, e.RowKey
	ops.op.Entity = bin
	ops.list[0] = &ops.op
	ts, err := s.backend.Write(ctx, s.tableID(rc.account, table), e.PartitionKey, ops.list[:])
	if err != nil {
		return err
	}
	e.Timestamp = ts

	buf := getBuf()
	defer putBuf(buf)
	// The ETag, the service root and the Location share one string: three
	// allocations were a measurable part of an insert's.
	b := edm.AppendETag(buf.b[:0], ts)
	etagEnd := len(b)
	if rc.base != "" {
		b = append(b, rc.base...)
	} else {
		b = appendBaseURL(b, rc)
	}
	baseEnd := len(b)
	b = append(b, '/')
	b = appendEntityPath(b, table, e.PartitionKey, e.RowKey)
	hv := string(b)
	rc.base = hv[etagEnd:baseEnd]
	h := w.Header()
	h["Etag"] = rc.hdr(hvETag, hv[:etagEnd])
	loc := rc.hdr(hvLocation, hv[etagEnd:])
	h["Location"] = loc
	h["Dataserviceid"] = loc
	switch prefer(rc.r) {
	case preferNoContent:
		h["Preference-Applied"] = returnNoContent
		rc.wrote = true
		w.WriteHeader(http.StatusNoContent)
		return nil
	case preferContent:
		h["Preference-Applied"] = returnContent
	}
	b = edm.AppendJSON(b[:0], e, s.encodeOptions(rc, table, true, nil))
	buf.b = b
	s.writeJSON(w, rc, http.StatusCreated, b)
	return nil
}

// insertOps is an insert's op and the one-element list the backend takes.
type insertOps struct {
	op   pb.EntityOp
	list [1]*pb.EntityOp
}

// ifMatch reads If-Match into an op. present is false when the header is
// absent.
func ifMatch(r *http.Request, op *pb.EntityOp) (present bool, err error) {
	return ifMatchValues(r.Header["If-Match"], op)
}

// neverMatches is an IfMatchUnixNano no entity has: Timestamps are whole
// 100 ns ticks, so one nanosecond past the epoch is never one.
const neverMatches = 1

// ifMatchValues is ifMatch on the header's values (batch sub-requests
// carry their own headers). The service's rule: "*" matches any entity; a
// weak ETag W/"…" (or w/"…") is a well-formed condition, which holds only
// for the entity whose ETag it is (anything else in the quotes is simply
// stale: 412 UpdateConditionNotSatisfied); a strong "…" or unquoted value,
// or one with a quote inside the quotes (a list), is 400 InvalidInput
// naming the value.
func ifMatchValues(v []string, op *pb.EntityOp) (present bool, err error) {
	if len(v) == 0 {
		return false, nil
	}
	if len(v) > 1 {
		return true, errInvalidETag(strings.Join(v, ","))
	}
	tag := strings.TrimSpace(v[0])
	if tag == "*" {
		op.IfMatchAny = true
		return true, nil
	}
	if len(tag) < 4 || (tag[0] != 'W' && tag[0] != 'w') || tag[1] != '/' || tag[2] != '"' || tag[len(tag)-1] != '"' {
		return true, errInvalidETag(tag)
	}
	if strings.IndexByte(tag[3:len(tag)-1], '"') >= 0 {
		// A quote inside is more than one ETag (`W/"a", W/"b"` in one
		// header line) or a malformed one: WCF Data Services'
		// IsETagValueValid refuses it so that "only one etag value is
		// specified", the service's message says; it is not a stale
		// condition (412).
		return true, errInvalidETag(tag)
	}
	op.IfMatchUnixNano = neverMatches
	if t, err := edm.ParseETag(tag); err == nil && !t.IsZero() {
		op.IfMatchUnixNano = t.UnixNano()
	}
	return true, nil
}

// updateEntity is Update Entity (PUT) and Merge Entity (PATCH, MERGE, or
// POST with X-HTTP-Method: MERGE). Without If-Match they are Insert Or
// Replace and Insert Or Merge.
func (s *Server) updateEntity(ctx context.Context, w http.ResponseWriter, rc *reqCtx, rt route, merge bool) error {
	op := &pb.EntityOp{PartitionKey: rt.pk, RowKey: rt.rk}
	conditional, err := ifMatch(rc.r, op)
	if err != nil {
		return err
	}
	if err := ifNoneMatchRefusal(rc.r.Header, false); err != nil {
		return err
	}
	kind := auth.EntityUpsert
	switch {
	case merge && conditional:
		op.Kind, kind = pb.OpKind_OP_KIND_MERGE, auth.EntityUpdate
	case merge:
		op.Kind = pb.OpKind_OP_KIND_INSERT_OR_MERGE
	case conditional:
		op.Kind, kind = pb.OpKind_OP_KIND_REPLACE, auth.EntityUpdate
	default:
		op.Kind = pb.OpKind_OP_KIND_INSERT_OR_REPLACE
	}
	if err := rc.principal.Authorize(auth.Access{Kind: kind, Table: rt.table, PartitionKey: rt.pk, RowKey: rt.rk}); err != nil {
		return err
	}
	e, err := s.decodeEntity(rc, &rt)
	if err != nil {
		return err
	}
	op.Entity = edm.MarshalBinary(e) // owned, as in insertEntity
	ts, err := s.backend.Write(ctx, s.tableID(rc.account, rt.table), rt.pk, []*pb.EntityOp{op})
	if err != nil {
		return err
	}
	s.writeNoContentETag(w, rc, ts)
	return nil
}

// deleteEntity is Delete Entity; If-Match ("*" or an ETag) is required.
func (s *Server) deleteEntity(ctx context.Context, w http.ResponseWriter, rc *reqCtx, rt route) error {
	op := &pb.EntityOp{Kind: pb.OpKind_OP_KIND_DELETE, PartitionKey: rt.pk, RowKey: rt.rk}
	present, err := ifMatch(rc.r, op)
	if err != nil {
		return err
	}
	if !present {
		return errMissingIfMatch
	}
	if err := ifNoneMatchRefusal(rc.r.Header, true); err != nil {
		return err
	}
	if err := rc.principal.Authorize(auth.Access{Kind: auth.EntityDelete, Table: rt.table, PartitionKey: rt.pk, RowKey: rt.rk}); err != nil {
		return err
	}
	if _, err := s.backend.Write(ctx, s.tableID(rc.account, rt.table), rt.pk, []*pb.EntityOp{op}); err != nil {
		return err
	}
	rc.wrote = true
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) writeNoContentETag(w http.ResponseWriter, rc *reqCtx, ts time.Time) {
	var tag [64]byte
	h := w.Header()
	h["Etag"] = []string{string(edm.AppendETag(tag[:0], ts))}
	rc.wrote = true
	w.WriteHeader(http.StatusNoContent)
}

// getEntity is the point read GET /t(PartitionKey='p',RowKey='r').
func (s *Server) getEntity(ctx context.Context, w http.ResponseWriter, rc *reqCtx, rt route) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.EntityRead, Table: rt.table, PartitionKey: rt.pk, RowKey: rt.rk}); err != nil {
		return err
	}
	var sel []string
	if rc.query != nil {
		var err error
		if sel, err = parseSelect(rc.q("$select")); err != nil {
			return err
		}
		if f := rc.q("$filter"); f != "" {
			// A filter on a point read is evaluated too: a mismatch is a
			// miss, 404 as a missing entity (WCF Data Services applies
			// $filter to a key lookup; the service's answer is inferred,
			// docs/compatibility.md). $top is not read here: accepted and
			// ignored, the service's answer unverified.
			flt, err := filter.Parse(f)
			if err != nil {
				return err
			}
			e, err := s.get(ctx, rc, rt.table, rt.pk, rt.rk)
			if err != nil {
				return err
			}
			if !flt.Match(e) {
				return newAPIError(http.StatusNotFound, "ResourceNotFound", msgResourceNotFound, "entity does not match $filter")
			}
			return s.writeEntity(w, rc, rt.table, e, sel)
		}
	}
	e, err := s.get(ctx, rc, rt.table, rt.pk, rt.rk)
	if err != nil {
		return err
	}
	return s.writeEntity(w, rc, rt.table, e, sel)
}

func (s *Server) writeEntity(w http.ResponseWriter, rc *reqCtx, table string, e *edm.Entity, sel []string) error {
	buf := getBuf()
	defer putBuf(buf)
	b := edm.AppendETag(buf.b[:0], e.Timestamp)
	w.Header()["Etag"] = rc.hdr(hvETag, string(b))
	opts := s.encodeOptions(rc, table, true, sel)
	if sel == nil || rc.meta == edm.NoMetadata {
		b = edm.AppendJSON(b[:0], e, opts)
	} else {
		b = appendProjectedElement(b[:0], e, opts)
	}
	buf.b = b
	s.writeJSON(w, rc, http.StatusOK, b)
	return nil
}

// appendProjectedElement appends a single entity read with $select. Its
// odata.metadata names the projection after the element,
// "<base>/$metadata#tbl/@Element&$select=a,b", as the service answers a
// point read with $select (the JavaScript SDK's recording
// "should select specific properties") and as a query's "#tbl&$select=…"
// does; edm.AppendJSON writes the element's without it, so the object is
// begun here and AppendJSON's continues it.
func appendProjectedElement(b []byte, e *edm.Entity, opts edm.EncodeOptions) []byte {
	b = append(b, `{"odata.metadata":"`...)
	b = appendJSONBody(b, opts.BaseURL)
	b = append(b, "/$metadata#"...)
	b = appendJSONBody(b, opts.Table)
	b = append(b, "/@Element&$select="...)
	b = appendJSONBody(b, strings.Join(opts.Select, ","))
	b = append(b, '"')
	opts.Element = false
	start := len(b)
	b = edm.AppendJSON(b, e, opts)
	if len(b) == start+2 { // "{}": nothing after the metadata
		return append(b[:start], '}')
	}
	b[start] = ','
	return b
}

func (s *Server) encodeOptions(rc *reqCtx, table string, element bool, sel []string) edm.EncodeOptions {
	o := edm.EncodeOptions{Metadata: rc.meta, Table: table, Account: rc.account, Element: element, Select: sel}
	if rc.meta != edm.NoMetadata {
		o.BaseURL = s.baseURL(rc)
	}
	return o
}

// queryEntities is Query Entities: GET /t() or /t with $filter, $select,
// $top and NextPartitionKey/NextRowKey.
func (s *Server) queryEntities(ctx context.Context, w http.ResponseWriter, rc *reqCtx, table string) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.EntityQuery, Table: table}); err != nil {
		return err
	}
	var q Query
	var err error
	if ft := rc.q("$filter"); ft != "" {
		if q.Filter, err = filter.Parse(ft); err != nil {
			return err
		}
		if q.Filter != nil {
			q.FilterText = q.Filter.String()
		}
	}
	if q.Select, err = parseSelect(rc.q("$select")); err != nil {
		return err
	}
	if q.Top, err = parseTop(rc.q("$top")); err != nil {
		return err
	}
	if err := parseContinuation(rc, &q); err != nil {
		return err
	}
	kr, clip := rc.principal.KeyRange()
	if clip {
		clipStart(&q, kr)
	}
	emptyPage := q.Top == 0
	if emptyPage {
		// $top=0: look one entity ahead (which also answers a missing
		// table) and return none, continuing at that entity.
		q.Top = 1
	}
	page, err := s.query(ctx, rc, table, q)
	if err != nil {
		return err
	}
	ents := page.Entities
	if emptyPage {
		if len(ents) > 0 {
			page.HasNext, page.NextPK, page.NextRK = true, ents[0].PartitionKey, ents[0].RowKey
		}
		page.Entities, ents = nil, nil
	}
	if clip {
		ents = clipPage(page, kr)
	}

	h := w.Header()
	if page.HasNext {
		var tb [256]byte
		h["X-Ms-Continuation-Nextpartitionkey"] = []string{string(appendToken(tb[:0], page.NextPK))}
		h["X-Ms-Continuation-Nextrowkey"] = []string{string(appendToken(tb[:0], page.NextRK))}
	}
	buf := getBuf()
	defer putBuf(buf)
	b := buf.b[:0]
	b = append(b, '{')
	if rc.meta != edm.NoMetadata {
		b = append(b, `"odata.metadata":"`...)
		b = appendJSONBody(b, s.baseURL(rc))
		b = append(b, "/$metadata#"...)
		b = appendJSONBody(b, table)
		if q.Select != nil {
			b = append(b, "&$select="...)
			b = appendJSONBody(b, strings.Join(q.Select, ","))
		}
		b = append(b, `",`...)
	}
	b = append(b, `"value":[`...)
	opts := s.encodeOptions(rc, table, false, q.Select)
	for i, e := range ents {
		if i > 0 {
			b = append(b, ',')
		}
		b = edm.AppendJSON(b, e, opts)
	}
	b = append(b, "]}"...)
	buf.b = b
	s.writeJSON(w, rc, http.StatusOK, b)
	return nil
}

// parseContinuation reads NextPartitionKey and NextRowKey into q. A
// parameter given with an empty value is 400 InvalidInput: the service
// refuses "NextPartitionKey=1!12!Q2FiUXVlcnk-&NextRowKey=" so (its answer
// to Storage Explorer 1.23.0, microsoft/AzureStorageExplorer#5434), and
// every token it hands out, an empty key's included ("1!0!"), is non-empty.
// NextRowKey without NextPartitionKey is ignored.
func parseContinuation(rc *reqCtx, q *Query) error {
	for _, name := range [...]string{"NextPartitionKey", "NextRowKey"} {
		if v := rc.query[name]; len(v) > 0 && v[0] == "" {
			return errInvalidInput("empty continuation token " + name + "=")
		}
	}
	npk := rc.q("NextPartitionKey")
	if npk == "" {
		return nil
	}
	var ok bool
	if q.NextPK, ok = decodeToken(npk); !ok {
		return errInvalidInput("malformed continuation token NextPartitionKey=" + strconv.Quote(npk))
	}
	q.HasNext = true
	if nrk := rc.q("NextRowKey"); nrk != "" {
		if q.NextRK, ok = decodeToken(nrk); !ok {
			return errInvalidInput("malformed continuation token NextRowKey=" + strconv.Quote(nrk))
		}
	}
	return nil
}

// appendJSONBody appends s escaped for the inside of a JSON string.
func appendJSONBody(b []byte, s string) []byte {
	start := len(b)
	b = appendJSONString(b, s)
	// appendJSONString added the quotes; drop them.
	copy(b[start:], b[start+1:len(b)-1])
	return b[:len(b)-2]
}

// clipStart moves a query's start to a service SAS's lower key bound.
func clipStart(q *Query, kr auth.KeyRange) {
	if kr.StartPartitionKey == "" {
		return
	}
	if !q.HasNext || q.NextPK < kr.StartPartitionKey || (q.NextPK == kr.StartPartitionKey && q.NextRK < kr.StartRowKey) {
		q.HasNext, q.NextPK, q.NextRK = true, kr.StartPartitionKey, kr.StartRowKey
	}
}

// clipPage keeps the entities inside a service SAS's key range, as Azure
// answers such queries, and ends the query once it passes the upper bound.
func clipPage(page *Page, kr auth.KeyRange) []*edm.Entity {
	out := page.Entities[:0:0]
	for _, e := range page.Entities {
		if kr.Contains(e.PartitionKey, e.RowKey) {
			out = append(out, e)
		} else if pastEnd(kr, e.PartitionKey, e.RowKey) {
			page.HasNext = false
			break
		}
	}
	if page.HasNext && pastEnd(kr, page.NextPK, page.NextRK) {
		page.HasNext = false
	}
	return out
}

func pastEnd(kr auth.KeyRange, pk, rk string) bool {
	if kr.EndPartitionKey == "" {
		return false
	}
	if pk != kr.EndPartitionKey {
		return pk > kr.EndPartitionKey
	}
	return kr.EndRowKey != "" && rk > kr.EndRowKey
}
