package frontend

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	"tablestore/frontend/auth"
	"tablestore/internal/rpcerr"
	pb "tablestore/proto/tablestorepb"
)

// Table ACLs (stored access policies): GET and PUT /t?comp=acl with an XML
// <SignedIdentifiers> document, read from the table (pb.Table.Acl, which
// reaches every front-end with the partition map) and written through
// Settings.SetTableACL. What the service does, from the Go SDK's
// recordings:
//
//   - PUT answers 204; an empty body clears the table's policies;
//   - GET answers 200 application/xml, a UTF-8 BOM then the document; times
//     come back in the service's format (seven fraction digits, Z); a
//     SignedIdentifier without AccessPolicy comes back without one; no
//     policies is "<SignedIdentifiers />";
//   - more than five identifiers, an identifier without Id, and a document
//     that does not parse are 400 InvalidXmlDocument "XML specified is not
//     syntactically valid.", in the service's XML error format.
//
// Choices without direct evidence, answered the same way: an Id longer
// than 64 characters (the documented limit), two identifiers with the same
// Id, a permission other than the letters r, a, u, d, and a time that is
// not ISO 8601 or has more than seven fraction digits.

// MaxSignedIdentifiers is Azure's limit of stored access policies per table.
const MaxSignedIdentifiers = 5

// maxACLBody bounds a Set Table ACL body: five identifiers are well under
// 2 KiB, so anything beyond 64 KiB is not a document worth parsing.
const maxACLBody = 64 << 10

var errInvalidXML = newAPIError(http.StatusBadRequest, "InvalidXmlDocument", "XML specified is not syntactically valid.", "")

func errInvalidXMLDetail(detail string) error {
	return newAPIError(http.StatusBadRequest, "InvalidXmlDocument", errInvalidXML.msg, detail)
}

// xmlBOM starts every XML document the service sends.
const xmlBOM = "\uFEFF"

const xmlDecl = `<?xml version="1.0" encoding="utf-8"?>`

// aclTimeLayout is how the service writes policy times.
const aclTimeLayout = "2006-01-02T15:04:05.0000000Z"

type xmlSignedIdentifiers struct {
	XMLName xml.Name              `xml:"SignedIdentifiers"`
	Items   []xmlSignedIdentifier `xml:"SignedIdentifier"`
}

type xmlSignedIdentifier struct {
	ID     *string          `xml:"Id"`
	Policy *xmlAccessPolicy `xml:"AccessPolicy"`
}

type xmlAccessPolicy struct {
	Start      *string `xml:"Start"`
	Expiry     *string `xml:"Expiry"`
	Permission *string `xml:"Permission"`
}

// getTableACL is Get Table ACL: GET /t?comp=acl.
func (s *Server) getTableACL(ctx context.Context, w http.ResponseWriter, rc *reqCtx, table string) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.ACLRead, Table: table}); err != nil {
		return err
	}
	t, err := s.backend.Table(ctx, s.tableID(rc.account, table))
	if err != nil {
		return err
	}
	buf := getBuf()
	defer putBuf(buf)
	b := append(buf.b[:0], xmlBOM+xmlDecl...)
	acl := t.GetAcl()
	if len(acl) == 0 {
		b = append(b, "<SignedIdentifiers />"...)
	} else {
		b = append(b, "<SignedIdentifiers>"...)
		for _, si := range acl {
			b = append(b, "<SignedIdentifier><Id>"...)
			b = appendXMLEscaped(b, si.GetId())
			b = append(b, "</Id>"...)
			if si.GetHasPolicy() {
				b = append(b, "<AccessPolicy>"...)
				b = appendXMLElement(b, "Start", si.GetStart())
				b = appendXMLElement(b, "Expiry", si.GetExpiry())
				b = appendXMLElement(b, "Permission", si.GetPermission())
				b = append(b, "</AccessPolicy>"...)
			}
			b = append(b, "</SignedIdentifier>"...)
		}
		b = append(b, "</SignedIdentifiers>"...)
	}
	buf.b = b
	s.writeXML(w, rc, http.StatusOK, b)
	return nil
}

// appendXMLElement appends <name>v</name>, nothing when v is empty.
func appendXMLElement(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, '<')
	b = append(b, name...)
	b = append(b, '>')
	b = appendXMLEscaped(b, v)
	b = append(b, "</"...)
	b = append(b, name...)
	return append(b, '>')
}

// setTableACL is Set Table ACL: PUT /t?comp=acl.
func (s *Server) setTableACL(ctx context.Context, w http.ResponseWriter, rc *reqCtx, table string) error {
	if err := rc.principal.Authorize(auth.Access{Kind: auth.ACLWrite, Table: table}); err != nil {
		return err
	}
	settings, ok := s.backend.(Settings)
	if !ok {
		return errNotImplemented("the backend keeps no table ACLs")
	}
	body, err := readSmallBody(rc, maxACLBody)
	if err != nil {
		return err
	}
	acl, err := parseSignedIdentifiers(body)
	if err != nil {
		return err
	}
	// The table must exist (TableNotFound otherwise) before the master is
	// asked, which also resolves the name's case.
	t, err := s.backend.Table(ctx, s.tableID(rc.account, table))
	if err != nil {
		return err
	}
	if err := settings.SetTableACL(ctx, t.GetName(), acl); err != nil {
		return err
	}
	w.Header()["Content-Length"] = []string{"0"}
	rc.wrote = true
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// readSmallBody reads a body of at most max bytes; more is 413.
func readSmallBody(rc *reqCtx, max int64) ([]byte, error) {
	if rc.r.ContentLength > max {
		return nil, errBodyTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(rc.r.Body, max+1))
	if err != nil {
		return nil, errInvalidInput("reading body: " + err.Error())
	}
	if int64(len(b)) > max {
		return nil, errBodyTooLarge
	}
	return b, nil
}

// parseSignedIdentifiers reads a Set Table ACL body into the stored form,
// times normalised to the service's format.
func parseSignedIdentifiers(body []byte) ([]*pb.SignedIdentifier, error) {
	body = bytes.TrimPrefix(bytes.TrimSpace(body), []byte(xmlBOM))
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	var doc xmlSignedIdentifiers
	if err := decodeXML(body, &doc); err != nil {
		return nil, err
	}
	if len(doc.Items) > MaxSignedIdentifiers {
		return nil, errInvalidXMLDetail(strconv.Itoa(len(doc.Items)) + " signed identifiers, the limit is 5")
	}
	out := make([]*pb.SignedIdentifier, 0, len(doc.Items))
	seen := map[string]bool{}
	for _, item := range doc.Items {
		if item.ID == nil || strings.TrimSpace(*item.ID) == "" {
			return nil, errInvalidXMLDetail("a signed identifier has no Id")
		}
		id := strings.TrimSpace(*item.ID)
		if len([]rune(id)) > 64 {
			return nil, errInvalidXMLDetail("signed identifier Id longer than 64 characters")
		}
		if seen[id] {
			return nil, errInvalidXMLDetail("signed identifier " + strconv.Quote(id) + " appears twice")
		}
		seen[id] = true
		si := &pb.SignedIdentifier{Id: id}
		if p := item.Policy; p != nil {
			si.HasPolicy = true
			var err error
			if si.Start, err = normalizeACLTime(p.Start); err != nil {
				return nil, err
			}
			if si.Expiry, err = normalizeACLTime(p.Expiry); err != nil {
				return nil, err
			}
			if p.Permission != nil {
				perm := strings.TrimSpace(*p.Permission)
				for _, c := range perm {
					if !strings.ContainsRune("raud", c) || strings.Count(perm, string(c)) > 1 {
						return nil, errInvalidXMLDetail("permission " + strconv.Quote(perm) + " is not made of the letters r, a, u, d")
					}
				}
				si.Permission = perm
			}
		}
		out = append(out, si)
	}
	return out, nil
}

// decodeXML decodes one XML document into v: anything encoding/xml refuses,
// or a document with trailing content, is InvalidXmlDocument.
func decodeXML(body []byte, v any) error {
	d := xml.NewDecoder(bytes.NewReader(body))
	if err := d.Decode(v); err != nil {
		return errInvalidXMLDetail(err.Error())
	}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return errInvalidXMLDetail(err.Error())
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(bytes.TrimSpace(t)) != 0 {
				return errInvalidXMLDetail("content after the document element")
			}
		case xml.Comment, xml.ProcInst:
		default:
			return errInvalidXMLDetail("content after the document element")
		}
	}
}

// aclTimeLayouts are the ISO 8601 forms accepted for policy times (the
// service parses them as .NET DateTime values, which carry 100 ns).
// A time without a zone is taken as UTC. Fraction digits are accepted by
// the seconds layouts when parsing.
var aclTimeLayouts = []string{
	"2006-01-02T15:04:05Z07:00",
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04:05",
	"2006-01-02T15:04",
	"2006-01-02",
}

func normalizeACLTime(v *string) (string, error) {
	if v == nil || strings.TrimSpace(*v) == "" {
		return "", nil
	}
	s := strings.TrimSpace(*v)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j-i-1 > 7 {
			return "", errInvalidXMLDetail("time " + strconv.Quote(s) + " has more than seven fraction digits")
		}
	}
	for _, l := range aclTimeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC().Format(aclTimeLayout), nil
		}
	}
	return "", errInvalidXMLDetail("time " + strconv.Quote(s) + " is not ISO 8601")
}

// writeXML sends an XML document.
func (s *Server) writeXML(w http.ResponseWriter, rc *reqCtx, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = contentTypeXML
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	rc.wrote = true
	w.WriteHeader(status)
	if rc.r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// policyPropagation is how long Azure lets a stored access policy's
// change take to take effect ("up to 30 seconds"): a front-end whose map
// has gone longer without a master's updates cannot tell a policy in
// force from one removed or cut short meanwhile.
const policyPropagation = 30 * time.Second

// mapStaleness is the backend's report of how long its partition map
// (which carries the tables' ACLs) has gone without a master's updates:
// 0 while a master streams them. A backend that does not report it is
// taken as current.
type mapStaleness interface {
	MapStaleFor() time.Duration
}

// policyLookup resolves a service SAS's stored access policy (si) from the
// table's ACL as the front-end's map holds it.
type policyLookup struct {
	backend Backend
	timeout time.Duration
	tableID func(account, table string) string
}

// AccessPolicy implements auth.PolicyLookup.
func (p policyLookup) AccessPolicy(account, table, id string) (auth.Policy, bool, error) {
	if validateTableName(table) != nil {
		// A tn that is no table name holds no policy. Looked up, the
		// primary account's "other/t" would be account other's table t
		// (see tableID), and whether its policy authenticated a SAS
		// would tell this account's owner about another account's ACLs.
		return auth.Policy{}, false, nil
	}
	if ms, ok := p.backend.(mapStaleness); ok {
		if d := ms.MapStaleFor(); d > policyPropagation {
			// Fail closed: a revoked policy must stop authorizing
			// within Azure's bound; a retry may reach a front-end a
			// master keeps current.
			return auth.Policy{}, false, rpcerr.New(codes.Unavailable, rpcerr.ReasonServerBusy,
				fmt.Sprintf("stored access policy %q of table %q: this front-end's copy of the table's ACL has had no master's updates for %v (a policy's change must take effect within %v)", id, table, d.Round(time.Second), policyPropagation), nil)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	t, err := p.backend.Table(ctx, p.tableID(account, table))
	if err != nil {
		if rpcerr.Is(err, rpcerr.ReasonTableNotFound) {
			return auth.Policy{}, false, nil
		}
		return auth.Policy{}, false, err
	}
	for _, si := range t.GetAcl() {
		if si.GetId() != id {
			continue
		}
		var pol auth.Policy
		if si.GetStart() != "" {
			if pol.Start, err = time.Parse(time.RFC3339Nano, si.GetStart()); err != nil {
				return auth.Policy{}, false, err
			}
		}
		if si.GetExpiry() != "" {
			if pol.Expiry, err = time.Parse(time.RFC3339Nano, si.GetExpiry()); err != nil {
				return auth.Policy{}, false, err
			}
		}
		pol.Permission = si.GetPermission()
		return pol, true, nil
	}
	return auth.Policy{}, false, nil
}
