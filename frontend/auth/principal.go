package auth

import (
	"fmt"
	"strings"
)

// PrincipalKind tells how a request was authenticated.
type PrincipalKind int

// Principal kinds.
const (
	PrincipalSharedKey  PrincipalKind = iota + 1 // SharedKey or SharedKeyLite header: the account owner
	PrincipalServiceSAS                          // table service SAS (tn)
	PrincipalAccountSAS                          // account SAS (ss, srt)
	PrincipalBearer                              // OAuth bearer token (--oauth basic)
)

// String names the kind for logs.
func (k PrincipalKind) String() string {
	switch k {
	case PrincipalSharedKey:
		return "SharedKey"
	case PrincipalServiceSAS:
		return "ServiceSAS"
	case PrincipalAccountSAS:
		return "AccountSAS"
	case PrincipalBearer:
		return "Bearer"
	}
	return fmt.Sprintf("PrincipalKind(%d)", int(k))
}

// Principal is an authenticated caller. Its fields are unexported so that
// only Authenticate can grant rights.
type Principal struct {
	kind        PrincipalKind
	account     string
	scheme      string // SharedKey or SharedKeyLite
	version     string // SAS sv
	permissions string // effective sp (after the stored policy)

	table    string // service SAS: lower-cased tn
	keyRange KeyRange

	services      string // account SAS ss
	resourceTypes string // account SAS srt
}

// Kind reports how the caller authenticated.
func (p *Principal) Kind() PrincipalKind { return p.kind }

// Account is the authenticated account name.
func (p *Principal) Account() string { return p.account }

// Scheme is "SharedKey", "SharedKeyLite" or "Bearer" for header authentication, "" for SAS.
func (p *Principal) Scheme() string { return p.scheme }

// SignedVersion is the SAS sv, which Azure also uses as the request version
// when the client sends no x-ms-version; "" for header authentication.
func (p *Principal) SignedVersion() string { return p.version }

// Table is the table a service SAS is restricted to (lower case); "" otherwise.
func (p *Principal) Table() string { return p.table }

// KeyRange returns the entity key range of a service SAS and whether it
// restricts anything. Azure answers queries made with such a SAS with only
// the entities inside the range (it does not fail them), so the front-end
// should clip query results and continuation with it.
func (p *Principal) KeyRange() (KeyRange, bool) {
	if p == nil || p.kind != PrincipalServiceSAS || p.keyRange.IsZero() {
		return KeyRange{}, false
	}
	return p.keyRange, true
}

// AccessKind is an operation class with its own SAS requirements.
//
// It is finer than "service / table / entity" because account SAS
// permissions differ between reading and writing service properties,
// between creating, deleting and listing tables, and because upserts need
// both add and update permissions.
type AccessKind int

// Access kinds.
const (
	ServiceRead  AccessKind = iota + 1 // Get Table Service Properties / Stats
	ServiceWrite                       // Set Table Service Properties
	TableList                          // Query Tables
	TableCreate                        // Create Table
	TableDelete                        // Delete Table
	EntityRead                         // Query Entities addressing one entity by key
	EntityQuery                        // Query Entities with a filter
	EntityAdd                          // Insert Entity
	EntityUpdate                       // Update Entity, Merge Entity (with If-Match)
	EntityUpsert                       // Insert Or Merge / Insert Or Replace (no If-Match)
	EntityDelete                       // Delete Entity
	ACLRead                            // Get Table ACL
	ACLWrite                           // Set Table ACL
)

var accessNames = map[AccessKind]string{
	ServiceRead: "ServiceRead", ServiceWrite: "ServiceWrite",
	TableList: "TableList", TableCreate: "TableCreate", TableDelete: "TableDelete",
	EntityRead: "EntityRead", EntityQuery: "EntityQuery", EntityAdd: "EntityAdd",
	EntityUpdate: "EntityUpdate", EntityUpsert: "EntityUpsert", EntityDelete: "EntityDelete",
	ACLRead: "ACLRead", ACLWrite: "ACLWrite",
}

// String names the kind for logs and error messages.
func (k AccessKind) String() string {
	if s, ok := accessNames[k]; ok {
		return s
	}
	return fmt.Sprintf("AccessKind(%d)", int(k))
}

// Access is one operation to authorize. For batches the front-end authorizes
// each sub-operation on its own.
type Access struct {
	Kind AccessKind
	// Table is the table addressed (entity, ACL, create and delete
	// operations); compared case-insensitively.
	Table string
	// PartitionKey and RowKey are the entity addressed by EntityRead, EntityAdd,
	// EntityUpdate, EntityUpsert and EntityDelete, checked against a service
	// SAS key range. EntityQuery ignores them: clip results with KeyRange.
	PartitionKey, RowKey string
}

// Authorize decides whether p may perform req, returning nil or an error
// wrapping one of the ErrAuthorization* sentinels:
//
//   - shared key: everything.
//   - service SAS: entity operations on table tn only, with permission
//     letters r (read, query), a (add), u (update), a+u (upsert), d (delete)
//     and the key range; anything at service or table level and any ACL
//     operation is ErrAuthorizationFailure, as Azure answers.
//   - account SAS: ss must contain t; srt s/c/o must cover service, table and
//     entity operations; sp per "Create an account SAS" (Query Tables l,
//     Create Table c or w, Delete Table d, service r/w, entities r/a/u/a+u/d).
//     ACL operations are never delegated.
func (p *Principal) Authorize(req Access) error {
	if p == nil {
		return fmt.Errorf("%w: no principal", ErrAuthorizationFailure)
	}
	if _, ok := accessNames[req.Kind]; !ok {
		return fmt.Errorf("%w: unknown access kind %d", ErrAuthorizationFailure, int(req.Kind))
	}
	switch p.kind {
	case PrincipalSharedKey:
		return nil
	case PrincipalBearer:
		// Table ACLs cannot be read or set with OAuth (the service and
		// Azurite refuse them); everything else is the owner's.
		if req.Kind == ACLRead || req.Kind == ACLWrite {
			return fmt.Errorf("%w: %s is not available with OAuth", ErrAuthorizationFailure, req.Kind)
		}
		return nil
	case PrincipalServiceSAS:
		return p.authorizeServiceSAS(req)
	case PrincipalAccountSAS:
		return p.authorizeAccountSAS(req)
	}
	return fmt.Errorf("%w: unknown principal kind", ErrAuthorizationFailure)
}

// entityNeed returns the permission letters an entity operation requires; all of
// them must be present.
func entityNeed(k AccessKind) string {
	switch k {
	case EntityRead, EntityQuery:
		return "r"
	case EntityAdd:
		return "a"
	case EntityUpdate:
		return "u"
	case EntityUpsert:
		return "au"
	case EntityDelete:
		return "d"
	}
	return ""
}

func hasAll(perms, need string) bool {
	for _, c := range need {
		if !strings.ContainsRune(perms, c) {
			return false
		}
	}
	return true
}

func (p *Principal) authorizeServiceSAS(req Access) error {
	need := entityNeed(req.Kind)
	if need == "" {
		return fmt.Errorf("%w: a service SAS cannot authorize %s", ErrAuthorizationFailure, req.Kind)
	}
	if !strings.EqualFold(req.Table, p.table) {
		return fmt.Errorf("%w: the SAS is for table %q, not %q", ErrAuthorizationFailure, p.table, req.Table)
	}
	if !hasAll(p.permissions, need) {
		return fmt.Errorf("%w: %s needs sp %q, the SAS has %q", ErrAuthorizationPermissionMismatch, req.Kind, need, p.permissions)
	}
	if req.Kind != EntityQuery && !p.keyRange.Contains(req.PartitionKey, req.RowKey) {
		return fmt.Errorf("%w: (%q, %q) is outside %s", ErrKeyOutOfRange, req.PartitionKey, req.RowKey, p.keyRange)
	}
	return nil
}

func (p *Principal) authorizeAccountSAS(req Access) error {
	if !strings.ContainsRune(p.services, 't') {
		return fmt.Errorf("%w: the SAS services %q do not include the table service", ErrAuthorizationServiceMismatch, p.services)
	}
	var rt rune
	var anyOf, allOf string
	switch req.Kind {
	case ServiceRead:
		rt, allOf = 's', "r"
	case ServiceWrite:
		rt, allOf = 's', "w"
	case TableList:
		rt, allOf = 'c', "l"
	case TableCreate:
		rt, anyOf = 'c', "cw"
	case TableDelete:
		rt, allOf = 'c', "d"
	case ACLRead, ACLWrite:
		return fmt.Errorf("%w: an account SAS cannot authorize %s", ErrAuthorizationFailure, req.Kind)
	default:
		rt, allOf = 'o', entityNeed(req.Kind)
	}
	if !strings.ContainsRune(p.resourceTypes, rt) {
		return fmt.Errorf("%w: %s needs srt %q, the SAS has %q", ErrAuthorizationResourceTypeMismatch, req.Kind, string(rt), p.resourceTypes)
	}
	ok := hasAll(p.permissions, allOf)
	if anyOf != "" {
		ok = strings.ContainsAny(p.permissions, anyOf)
	}
	if !ok {
		want := allOf
		if anyOf != "" {
			want = "one of " + anyOf
		}
		return fmt.Errorf("%w: %s needs sp %q, the SAS has %q", ErrAuthorizationPermissionMismatch, req.Kind, want, p.permissions)
	}
	return nil
}

// KeyRange is the entity range of a service SAS. An empty field is an
// absent bound: the string-to-sign cannot tell an absent bound from an empty
// one, and for lower bounds the two mean the same since "" is the smallest
// key. (An upper bound of "" is therefore not expressible.)
type KeyRange struct {
	StartPartitionKey, StartRowKey string // spk, srk
	EndPartitionKey, EndRowKey     string // epk, erk
}

// IsZero reports whether the range restricts nothing.
func (k KeyRange) IsZero() bool { return k == KeyRange{} }

// Contains applies the table of "Specifying table access ranges":
//
//	spk        pk >= spk
//	epk        pk <= epk
//	spk, srk   pk > spk || (pk == spk && rk >= srk)
//	epk, erk   pk < epk || (pk == epk && rk <= erk)
//
// Keys compare as strings, the order entities are stored in.
func (k KeyRange) Contains(pk, rk string) bool {
	if k.StartPartitionKey != "" {
		if k.StartRowKey != "" {
			if pk < k.StartPartitionKey || (pk == k.StartPartitionKey && rk < k.StartRowKey) {
				return false
			}
		} else if pk < k.StartPartitionKey {
			return false
		}
	}
	if k.EndPartitionKey != "" {
		if k.EndRowKey != "" {
			if pk > k.EndPartitionKey || (pk == k.EndPartitionKey && rk > k.EndRowKey) {
				return false
			}
		} else if pk > k.EndPartitionKey {
			return false
		}
	}
	return true
}

// String renders the bounds for error messages.
func (k KeyRange) String() string {
	return fmt.Sprintf("[(%q, %q) .. (%q, %q)]", k.StartPartitionKey, k.StartRowKey, k.EndPartitionKey, k.EndRowKey)
}
