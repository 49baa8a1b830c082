package auth

import (
	"errors"
	"fmt"
	"testing"
)

var allKinds = []AccessKind{ServiceRead, ServiceWrite, TableList, TableCreate, TableDelete, EntityRead, EntityQuery,
	EntityAdd, EntityUpdate, EntityUpsert, EntityDelete, ACLRead, ACLWrite}

func TestAuthorizeSharedKey(t *testing.T) {
	p := &Principal{kind: PrincipalSharedKey, account: DevAccountName}
	for _, k := range allKinds {
		t.Run(k.String(), func(t *testing.T) {
			if err := p.Authorize(Access{Kind: k, Table: "any"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, ok := p.KeyRange(); ok {
		t.Fatal("shared key has no key range")
	}
}

func TestAuthorizeServiceSAS(t *testing.T) {
	sas := func(perms string) *Principal {
		return &Principal{kind: PrincipalServiceSAS, account: DevAccountName, table: "mytable", permissions: perms}
	}
	tests := []struct {
		perms string
		kind  AccessKind
		table string
		want  error
	}{
		// Entity operations need their letters.
		{"r", EntityRead, "mytable", nil},
		{"r", EntityQuery, "MyTable", nil}, // table names are case-insensitive
		{"aud", EntityRead, "mytable", ErrAuthorizationPermissionMismatch},
		{"aud", EntityQuery, "mytable", ErrAuthorizationPermissionMismatch},
		{"a", EntityAdd, "mytable", nil},
		{"rud", EntityAdd, "mytable", ErrAuthorizationPermissionMismatch},
		{"u", EntityUpdate, "mytable", nil},
		{"rad", EntityUpdate, "mytable", ErrAuthorizationPermissionMismatch},
		{"au", EntityUpsert, "mytable", nil},
		{"ua", EntityUpsert, "mytable", nil},
		{"a", EntityUpsert, "mytable", ErrAuthorizationPermissionMismatch},
		{"u", EntityUpsert, "mytable", ErrAuthorizationPermissionMismatch},
		{"d", EntityDelete, "mytable", nil},
		{"rau", EntityDelete, "mytable", ErrAuthorizationPermissionMismatch},
		// Another table.
		{"raud", EntityRead, "other", ErrAuthorizationFailure},
		{"raud", EntityAdd, "", ErrAuthorizationFailure},
		// Never grantable by a service SAS, whatever the letters.
		{"raud", ServiceRead, "", ErrAuthorizationFailure},
		{"raud", ServiceWrite, "", ErrAuthorizationFailure},
		{"raud", TableList, "", ErrAuthorizationFailure},
		{"raud", TableCreate, "mytable", ErrAuthorizationFailure},
		{"raud", TableDelete, "mytable", ErrAuthorizationFailure},
		{"raud", ACLRead, "mytable", ErrAuthorizationFailure},
		{"raud", ACLWrite, "mytable", ErrAuthorizationFailure},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/sp=%s/%s", tc.kind, tc.perms, tc.table), func(t *testing.T) {
			err := sas(tc.perms).Authorize(Access{Kind: tc.kind, Table: tc.table})
			checkErr(t, err, tc.want)
		})
	}
}

func checkErr(t *testing.T, err, want error) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("want %v, got %v", want, err)
	}
	// The most specific sentinel decides the Azure code.
	gotCode, _ := ErrorCode(err)
	wantCode, _ := ErrorCode(want)
	if gotCode != wantCode {
		t.Fatalf("code %q, want %q (%v)", gotCode, wantCode, err)
	}
}

func TestAuthorizeAccountSAS(t *testing.T) {
	acct := func(ss, srt, sp string) *Principal {
		return &Principal{kind: PrincipalAccountSAS, account: DevAccountName, services: ss, resourceTypes: srt, permissions: sp}
	}
	tests := []struct {
		ss, srt, sp string
		kind        AccessKind
		want        error
	}{
		{"bq", "sco", "rwdlacu", EntityRead, ErrAuthorizationServiceMismatch},
		{"bqtf", "sco", "rwdlacu", EntityRead, nil},
		// Service level: srt s, r to read, w to write.
		{"t", "s", "r", ServiceRead, nil},
		{"t", "co", "rwdlacup", ServiceRead, ErrAuthorizationResourceTypeMismatch},
		{"t", "s", "wdlacup", ServiceRead, ErrAuthorizationPermissionMismatch},
		{"t", "s", "w", ServiceWrite, nil},
		{"t", "s", "r", ServiceWrite, ErrAuthorizationPermissionMismatch},
		// Table level: srt c; Query Tables l (srt s is not enough, as Azure answers).
		{"t", "c", "l", TableList, nil},
		{"t", "s", "rwdlacup", TableList, ErrAuthorizationResourceTypeMismatch},
		{"t", "c", "rwdacup", TableList, ErrAuthorizationPermissionMismatch},
		{"t", "c", "c", TableCreate, nil},
		{"t", "c", "w", TableCreate, nil},
		{"t", "c", "ra", TableCreate, ErrAuthorizationPermissionMismatch},
		{"t", "so", "cw", TableCreate, ErrAuthorizationResourceTypeMismatch},
		{"t", "c", "d", TableDelete, nil},
		{"t", "c", "rwl", TableDelete, ErrAuthorizationPermissionMismatch},
		// Entity level: srt o.
		{"t", "o", "r", EntityRead, nil},
		{"t", "o", "r", EntityQuery, nil},
		{"t", "sc", "r", EntityQuery, ErrAuthorizationResourceTypeMismatch},
		{"t", "o", "wl", EntityQuery, ErrAuthorizationPermissionMismatch},
		{"t", "o", "a", EntityAdd, nil},
		{"t", "o", "wc", EntityAdd, ErrAuthorizationPermissionMismatch},
		{"t", "o", "u", EntityUpdate, nil},
		{"t", "o", "w", EntityUpdate, ErrAuthorizationPermissionMismatch},
		{"t", "o", "au", EntityUpsert, nil},
		{"t", "o", "u", EntityUpsert, ErrAuthorizationPermissionMismatch},
		{"t", "o", "aw", EntityUpsert, ErrAuthorizationPermissionMismatch},
		{"t", "o", "d", EntityDelete, nil},
		{"t", "o", "r", EntityDelete, ErrAuthorizationPermissionMismatch},
		// ACLs are never delegated.
		{"t", "sco", "rwdlacup", ACLRead, ErrAuthorizationFailure},
		{"t", "sco", "rwdlacup", ACLWrite, ErrAuthorizationFailure},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/ss=%s/srt=%s/sp=%s", tc.kind, tc.ss, tc.srt, tc.sp), func(t *testing.T) {
			err := acct(tc.ss, tc.srt, tc.sp).Authorize(Access{Kind: tc.kind, Table: "anytable", PartitionKey: "p", RowKey: "r"})
			checkErr(t, err, tc.want)
		})
	}
	if _, ok := acct("t", "o", "r").KeyRange(); ok {
		t.Fatal("account SAS has no key range")
	}
}

func TestAuthorizeBadInput(t *testing.T) {
	var nilP *Principal
	if err := nilP.Authorize(Access{Kind: EntityRead}); !errors.Is(err, ErrAuthorizationFailure) {
		t.Fatal(err)
	}
	if _, ok := nilP.KeyRange(); ok {
		t.Fatal("nil principal has no range")
	}
	p := &Principal{kind: PrincipalSharedKey}
	for _, k := range []AccessKind{0, 99} {
		if err := p.Authorize(Access{Kind: k}); !errors.Is(err, ErrAuthorizationFailure) {
			t.Fatalf("kind %v: %v", k, err)
		}
	}
	if err := (&Principal{}).Authorize(Access{Kind: EntityRead}); !errors.Is(err, ErrAuthorizationFailure) {
		t.Fatal(err)
	}
	if AccessKind(99).String() != "AccessKind(99)" || PrincipalKind(9).String() != "PrincipalKind(9)" || PrincipalAccountSAS.String() != "AccountSAS" {
		t.Fatal("String")
	}
}

func TestKeyRangeContains(t *testing.T) {
	type key struct{ pk, rk string }
	tests := []struct {
		name string
		kr   KeyRange
		in   []key
		out  []key
	}{
		{name: "unbounded", kr: KeyRange{}, in: []key{{"", ""}, {"a", "b"}, {"\uffff", "\uffff"}}},
		{name: "spk alone: pk >= spk",
			kr: KeyRange{StartPartitionKey: "m"},
			in: []key{{"m", ""}, {"m", "a"}, {"n", ""}, {"mm", ""}}, out: []key{{"l", "zzz"}, {"", "m"}}},
		{name: "epk alone: pk <= epk",
			kr: KeyRange{EndPartitionKey: "m"},
			in: []key{{"m", "zzz"}, {"a", ""}, {"", ""}}, out: []key{{"mm", ""}, {"n", ""}}},
		{name: "spk+srk: pk > spk || pk == spk && rk >= srk",
			kr: KeyRange{StartPartitionKey: "m", StartRowKey: "5"},
			in: []key{{"m", "5"}, {"m", "6"}, {"m", "50"}, {"n", "0"}, {"n", ""}}, out: []key{{"m", "4"}, {"m", ""}, {"l", "9"}}},
		{name: "epk+erk: pk < epk || pk == epk && rk <= erk",
			kr: KeyRange{EndPartitionKey: "m", EndRowKey: "5"},
			in: []key{{"m", "5"}, {"m", "4"}, {"m", ""}, {"l", "9"}}, out: []key{{"m", "50"}, {"m", "6"}, {"n", ""}}},
		{name: "spk==epk: one partition",
			kr: KeyRange{StartPartitionKey: "p", EndPartitionKey: "p"},
			in: []key{{"p", ""}, {"p", "anything"}}, out: []key{{"o", "z"}, {"q", ""}, {"pp", ""}}},
		{name: "spk==epk, srk==erk: one entity",
			kr: KeyRange{StartPartitionKey: "p", StartRowKey: "r", EndPartitionKey: "p", EndRowKey: "r"},
			in: []key{{"p", "r"}}, out: []key{{"p", "q"}, {"p", "rr"}, {"p", ""}, {"o", "r"}, {"q", "r"}}},
		{name: "all four, across partitions",
			kr:  KeyRange{StartPartitionKey: "b", StartRowKey: "5", EndPartitionKey: "d", EndRowKey: "5"},
			in:  []key{{"b", "5"}, {"b", "9"}, {"c", ""}, {"c", "zzz"}, {"d", ""}, {"d", "5"}},
			out: []key{{"b", "4"}, {"d", "6"}, {"a", "9"}, {"e", ""}}},
		{name: "non-ASCII keys compare by code point",
			kr: KeyRange{StartPartitionKey: "é", EndPartitionKey: "é"},
			in: []key{{"é", "x"}}, out: []key{{"e", "x"}, {"ê", "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range tc.in {
				if !tc.kr.Contains(k.pk, k.rk) {
					t.Errorf("%s should contain (%q, %q)", tc.kr, k.pk, k.rk)
				}
			}
			for _, k := range tc.out {
				if tc.kr.Contains(k.pk, k.rk) {
					t.Errorf("%s should not contain (%q, %q)", tc.kr, k.pk, k.rk)
				}
			}
		})
	}
}

func TestAuthorizeKeyRange(t *testing.T) {
	p := &Principal{kind: PrincipalServiceSAS, table: "mytable", permissions: "raud",
		keyRange: KeyRange{StartPartitionKey: "b", StartRowKey: "5", EndPartitionKey: "d", EndRowKey: "5"}}
	kr, ok := p.KeyRange()
	if !ok || kr.StartPartitionKey != "b" || kr.EndRowKey != "5" {
		t.Fatalf("KeyRange() = %v, %v", kr, ok)
	}
	for _, k := range []AccessKind{EntityRead, EntityAdd, EntityUpdate, EntityUpsert, EntityDelete} {
		t.Run(k.String(), func(t *testing.T) {
			checkErr(t, p.Authorize(Access{Kind: k, Table: "mytable", PartitionKey: "c", RowKey: "x"}), nil)
			err := p.Authorize(Access{Kind: k, Table: "mytable", PartitionKey: "d", RowKey: "6"})
			checkErr(t, err, ErrKeyOutOfRange)
			if !errors.Is(err, ErrAuthorizationFailure) {
				t.Fatal("ErrKeyOutOfRange must also be an ErrAuthorizationFailure")
			}
		})
	}
	// Queries are clipped by the front-end, not refused.
	checkErr(t, p.Authorize(Access{Kind: EntityQuery, Table: "mytable", PartitionKey: "z"}), nil)
	// Permission problems are reported before range problems.
	q := &Principal{kind: PrincipalServiceSAS, table: "mytable", permissions: "r", keyRange: p.keyRange}
	checkErr(t, q.Authorize(Access{Kind: EntityDelete, Table: "mytable", PartitionKey: "z"}), ErrAuthorizationPermissionMismatch)
}

func TestErrorCode(t *testing.T) {
	tests := []struct {
		err  error
		code string
	}{
		{ErrAuthenticationFailed, "AuthenticationFailed"},
		{authFailed("x %d", 1), "AuthenticationFailed"},
		{ErrAuthorizationFailure, "AuthorizationFailure"},
		{ErrKeyOutOfRange, "AuthorizationFailure"},
		{fmt.Errorf("wrapped: %w", ErrAuthorizationPermissionMismatch), "AuthorizationPermissionMismatch"},
		{ErrAuthorizationResourceTypeMismatch, "AuthorizationResourceTypeMismatch"},
		{ErrAuthorizationServiceMismatch, "AuthorizationServiceMismatch"},
		{ErrAuthorizationSourceIPMismatch, "AuthorizationSourceIPMismatch"},
		{ErrAuthorizationProtocolMismatch, "AuthorizationProtocolMismatch"},
		{errors.New("other"), ""},
		{nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			code, ok := ErrorCode(tc.err)
			if code != tc.code || ok != (tc.code != "") {
				t.Fatalf("ErrorCode(%v) = %q, %v", tc.err, code, ok)
			}
		})
	}
	if got := authFailed("reason %q", "r").Error(); got != `auth: authentication failed: reason "r"` {
		t.Fatalf("message %q", got)
	}
}
