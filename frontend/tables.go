package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"tablestore/frontend/auth"
	"tablestore/internal/edm"
	"tablestore/internal/filter"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// MaxPageSize is Azure's largest page: $top above it is rejected and
// queries without $top return at most this many results per page.
const MaxPageSize = 1000

// createTable is Create Table: POST /Tables {"TableName":"t"}.
func (s *Server) createTable(ctx context.Context, w http.ResponseWriter, rc *reqCtx) error {
	buf, err := s.readBody(rc)
	if err != nil {
		return err
	}
	tn, err := createTableName(buf.b)
	putBuf(buf)
	if err != nil {
		return err
	}
	if tn == nil {
		return newAPIError(http.StatusBadRequest, "PropertiesNeedValue", edmMessages["PropertiesNeedValue"], "create table body has no TableName")
	}
	name := *tn
	if strings.EqualFold(name, "tables") {
		return errTableNameReserved
	}
	if err := validateTableName(name); err != nil {
		return err
	}
	if err := rc.principal.Authorize(auth.Access{Kind: auth.TableCreate, Table: name}); err != nil {
		return err
	}
	t, err := s.backend.CreateTable(withRequestID(ctx, rc), s.tableID(rc.account, name))
	if err != nil {
		return err
	}
	if t != nil && t.GetName() != "" {
		name, _ = s.userTable(rc.account, t.GetName())
	}
	h := w.Header()
	loc := s.baseURL(rc) + "/Tables('" + name + "')"
	// Location only: the service answers a Create Table with content
	// without DataServiceId (its recorded 201s), which OData sends in
	// place of the body's id when Prefer: return-no-content applies.
	h["Location"] = []string{loc}
	switch prefer(rc.r) {
	case preferNoContent:
		h["Dataserviceid"] = []string{loc}
		h["Preference-Applied"] = returnNoContent
		rc.wrote = true
		w.WriteHeader(http.StatusNoContent)
		return nil
	case preferContent:
		h["Preference-Applied"] = returnContent
	}
	buf = getBuf()
	defer putBuf(buf)
	buf.b = s.appendTableJSON(buf.b[:0], rc, name, true, nil)
	s.writeJSON(w, rc, http.StatusCreated, buf.b)
	return nil
}

// createTableName reads the TableName of a Create Table body; nil when the
// body has none (or a null one). Property names are case-sensitive, as in
// every OData body the service reads ("tablename" is another property, not
// the table's name; encoding/json would have matched it case-insensitively
// and created the table), and a property given twice is refused as in an
// entity body (400 InvalidInput) rather than the last one winning. Other
// properties (odata.* annotations among them) are ignored.
func createTableName(b []byte) (*string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		return nil, errInvalidInput("create table body is not a JSON object")
	}
	raw, ok := obj["TableName"]
	if !ok {
		return nil, nil
	}
	if duplicateKey(b, "TableName") {
		return nil, errInvalidInput("create table body names TableName twice")
	}
	var name *string
	if err := json.Unmarshal(raw, &name); err != nil {
		return nil, errInvalidInput("create table body: TableName is not a string")
	}
	return name, nil
}

// duplicateKey reports whether the top-level JSON object b holds key more
// than once (json.Unmarshal into a map keeps the last silently).
func duplicateKey(b []byte, key string) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	seen := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		if k, _ := t.(string); k == key {
			if seen {
				return true
			}
			seen = true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return false
}

// deleteTable is Delete Table: DELETE /Tables('t').
func (s *Server) deleteTable(ctx context.Context, w http.ResponseWriter, rc *reqCtx, name string) error {
	if err := validateTableName(name); err != nil {
		return err
	}
	if err := rc.principal.Authorize(auth.Access{Kind: auth.TableDelete, Table: name}); err != nil {
		return err
	}
	if err := s.backend.DeleteTable(withRequestID(ctx, rc), s.tableID(rc.account, name)); err != nil {
		if rpcerr.Is(err, rpcerr.ReasonTableNotFound) {
			// The service answers a Delete Table of a table that is not
			// there as a missing resource, not TableNotFound (its answer
			// recorded in Azurite issue #748), as does Azurite since.
			return newAPIError(http.StatusNotFound, "ResourceNotFound", msgResourceNotFound, "delete of a table that does not exist")
		}
		return err
	}
	rc.wrote = true
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// withRequestID passes the client's x-ms-client-request-id on to the
// Backend: the same on an SDK's retries of one request, it lets the master
// answer a retried create or delete with its first outcome (not 409 or 404).
func withRequestID(ctx context.Context, rc *reqCtx) context.Context {
	if v := rc.r.Header["X-Ms-Client-Request-Id"]; len(v) > 0 {
		return WithClientRequestID(ctx, v[0])
	}
	return ctx
}

// Accounts share the cluster's tables by name: the primary account's
// (Config.AccountName, devstoreaccount1 by default) are stored under their
// own names, as they always were, and every other account's under
// "<account>/<table>". No table name contains '/', so no account sees or
// reaches another's tables, and a single-account deployment's data stays
// where it is.
const accountTableSep = "/"

// tableID is the cluster's name of an account's table.
func (s *Server) tableID(account, table string) string {
	if account == "" || account == s.cfg.AccountName {
		return table
	}
	return account + accountTableSep + table
}

// userTable turns a cluster table name back into the name account sees;
// mine is false when the table belongs to another account.
func (s *Server) userTable(account, id string) (name string, mine bool) {
	acct, name, namespaced := strings.Cut(id, accountTableSep)
	if !namespaced {
		return id, account == "" || account == s.cfg.AccountName
	}
	return name, acct == account
}

// tableGetter exposes a table to $filter as the single property TableName.
type tableGetter string

func (g tableGetter) Get(name string) (edm.Value, bool) {
	if name == "TableName" {
		return edm.StringValue(string(g)), true
	}
	return edm.Value{}, false
}

// queryTables is Query Tables: GET /Tables with $filter (on TableName),
// $top, $select and NextTableName, or GET /Tables('t') for one table.
func (s *Server) queryTables(ctx context.Context, w http.ResponseWriter, rc *reqCtx, single string) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.TableList}); err != nil {
		return err
	}
	sel, err := parseSelect(rc.q("$select"))
	if err != nil {
		return err
	}
	if single != "" {
		if err := validateTableName(single); err != nil {
			return err
		}
		t, err := s.backend.Table(ctx, s.tableID(rc.account, single))
		if err != nil {
			return err
		}
		name, _ := s.userTable(rc.account, t.GetName())
		buf := getBuf()
		defer putBuf(buf)
		buf.b = s.appendTableJSON(buf.b[:0], rc, name, true, sel)
		s.writeJSON(w, rc, http.StatusOK, buf.b)
		return nil
	}
	f, err := filter.Parse(rc.q("$filter"))
	if err != nil {
		return err
	}
	top := s.tablePage
	if rc.q("$top") != "" {
		if top, err = parseTop(rc.q("$top")); err != nil {
			return err
		}
	}
	next := ""
	if v := rc.q("NextTableName"); v != "" {
		var ok bool
		if next, ok = decodeToken(v); !ok {
			return errInvalidInput("malformed continuation token NextTableName=" + strconv.Quote(v))
		}
	}
	var page []string
	nextName, more := "", false
	// The account's tables sort together: the primary account's have no
	// '/', another's all start with "<account>/"; the walk starts at the
	// continuation and stops one past the page.
	from := s.tableID(rc.account, next)
	primary := s.tableID(rc.account, "") == ""
	visit := func(t *pb.Table) bool {
		n, mine := s.userTable(rc.account, t.GetName())
		if !mine {
			// The primary account's tables are interleaved with the
			// others'; another account's end where its prefix does.
			return primary
		}
		if n < next || !f.Match(tableGetter(n)) {
			return true
		}
		if len(page) == top {
			nextName, more = n, true
			return false
		}
		page = append(page, n)
		return true
	}
	if l, ok := s.backend.(TableLister); ok {
		if err := l.TablesFrom(ctx, from, visit); err != nil {
			return err
		}
	} else {
		tables, err := s.backend.Tables(ctx)
		if err != nil {
			return err
		}
		if !slices.IsSortedFunc(tables, func(a, b *pb.Table) int { return strings.Compare(a.GetName(), b.GetName()) }) {
			tables = slices.Clone(tables)
			slices.SortFunc(tables, func(a, b *pb.Table) int { return strings.Compare(a.GetName(), b.GetName()) })
		}
		i := sort.Search(len(tables), func(i int) bool { return tables[i].GetName() >= from })
		for _, t := range tables[i:] {
			if !visit(t) {
				break
			}
		}
	}

	h := w.Header()
	if more {
		h["X-Ms-Continuation-Nexttablename"] = []string{encodeToken(nextName)}
	}
	buf := getBuf()
	defer putBuf(buf)
	b := buf.b[:0]
	b = append(b, '{')
	if rc.meta != edm.NoMetadata {
		b = append(b, `"odata.metadata":`...)
		b = appendJSONString(b, s.baseURL(rc)+"/$metadata#Tables")
		b = append(b, ',')
	}
	b = append(b, `"value":[`...)
	for i, n := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = s.appendTableJSON(b, rc, n, false, sel)
	}
	b = append(b, "]}"...)
	buf.b = b
	s.writeJSON(w, rc, http.StatusOK, b)
	return nil
}

// appendTableJSON writes one table object at the request's metadata level.
func (s *Server) appendTableJSON(b []byte, rc *reqCtx, name string, element bool, sel []string) []byte {
	b = append(b, '{')
	first := true
	sep := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	if rc.meta != edm.NoMetadata && element {
		sep()
		b = append(b, `"odata.metadata":`...)
		b = appendJSONString(b, s.baseURL(rc)+"/$metadata#Tables/@Element")
	}
	if rc.meta == edm.FullMetadata {
		sep()
		b = append(b, `"odata.type":`...)
		b = appendJSONString(b, rc.account+".Tables")
		b = append(b, `,"odata.id":`...)
		b = appendJSONString(b, s.baseURL(rc)+"/Tables('"+name+"')")
		b = append(b, `,"odata.editLink":`...)
		b = appendJSONString(b, "Tables('"+name+"')")
	}
	if sel == nil || slices.Contains(sel, "*") || slices.Contains(sel, "TableName") {
		sep()
		b = append(b, `"TableName":`...)
		b = appendJSONString(b, name)
	}
	return append(b, '}')
}

// parseSelect splits a $select list; nil when absent.
func parseSelect(v string) ([]string, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	out := parts[:0]
	seen := make(map[string]struct{}, min(len(parts), maxSelectNames+1))
	for _, p := range parts {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if _, dup := seen[p]; dup {
			continue
		}
		seen[p] = struct{}{}
		out = append(out, p)
		if len(out) > maxSelectNames {
			return nil, errInvalidInput(fmt.Sprintf("$select names more than %d properties", maxSelectNames))
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// maxSelectNames bounds the distinct names of a $select: an entity has at
// most 255 properties, and projection costs names × properties per entity,
// so a request line of a megabyte of names would cost a core minutes.
const maxSelectNames = 1024

// parseTop reads $top: 0..1000, MaxPageSize when absent or empty. Larger
// values are rejected as Azure does (400 InvalidInput) rather than clipped;
// 0 asks for an empty page (200 {"value":[]}), as the service answers it. A
// value that is not an integer is a query syntax error, InvalidInput with
// WCF Data Services' message, as the service parses $top
// (RequestQueryProcessor.ReadSkipOrTopArgument).
func parseTop(v string) (int, error) {
	if v == "" {
		return MaxPageSize, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, newAPIError(http.StatusBadRequest, "InvalidInput", "Incorrect format for $top argument '"+v+"'.", "")
	}
	if n < 0 || n > MaxPageSize {
		return 0, errInvalidInput("$top=" + v + " is outside 0.." + strconv.Itoa(MaxPageSize))
	}
	return n, nil
}

// preference is the Prefer header of an insert.
type preference uint8

const (
	preferNone preference = iota
	preferContent
	preferNoContent
)

func prefer(r *http.Request) preference { return preferValues(r.Header["Prefer"]) }

// preferValues reads the values of a Prefer header.
func preferValues(v []string) preference {
	if len(v) == 0 {
		return preferNone
	}
	for _, p := range v {
		for part := range strings.SplitSeq(p, ",") {
			switch strings.ToLower(strings.TrimSpace(part)) {
			case "return-no-content":
				return preferNoContent
			case "return-content":
				return preferContent
			}
		}
	}
	return preferNone
}

// writeJSON sends a JSON body with the OData headers.
func (s *Server) writeJSON(w http.ResponseWriter, rc *reqCtx, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentTypeFor(rc.meta)
	h["Content-Length"] = rc.hdr(hvContentLength, strconv.Itoa(len(body)))
	rc.wrote = true
	w.WriteHeader(status)
	if rc.r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}
