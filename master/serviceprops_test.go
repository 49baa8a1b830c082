package master

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// TestServicePropertiesPerAccount applies Set Service Properties for the
// primary account (no account: every entry from before the field) and for
// named accounts, and checks each keeps its own document through the
// state, a snapshot and the partition map.
func TestServicePropertiesPerAccount(t *testing.T) {
	s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1}
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	set := func(account, doc string) {
		t.Helper()
		if res := apply(servicePropertiesKind(account), &pb.SetServicePropertiesCommand{Account: account, Properties: []byte(doc)}); res.err != nil {
			t.Fatal(res.err)
		}
	}
	// An entry an older build wrote: kind 5, no account field.
	old, err := proto.Marshal(&pb.SetServicePropertiesCommand{Properties: []byte("legacy")})
	if err != nil {
		t.Fatal(err)
	}
	if res := handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVICE_PROPERTIES](s.fsm.st, old); res.err != nil {
		t.Fatal(res.err)
	}
	set("accta", "a1")
	set("acctb", "b1")
	set("accta", "a2")
	set("acctb", "") // cleared: the defaults again

	want := func(what string, primary string, others map[string]string, gotPrimary []byte, got map[string][]byte) {
		t.Helper()
		if string(gotPrimary) != primary {
			t.Errorf("%s: primary = %q, want %q", what, gotPrimary, primary)
		}
		if len(got) != len(others) {
			t.Errorf("%s: accounts %v, want %v", what, got, others)
		}
		for a, d := range others {
			if string(got[a]) != d {
				t.Errorf("%s: %s = %q, want %q", what, a, got[a], d)
			}
		}
	}
	others := map[string]string{"accta": "a2"}
	want("state", "legacy", others, s.fsm.st.serviceProperties, s.fsm.st.accountProperties)
	r := snapshotted(t, s.fsm.st)
	want("restored snapshot", "legacy", others, r.serviceProperties, r.accountProperties)
	m, _ := s.partitionMap()
	want("map", "legacy", others, m.GetServiceProperties(), m.GetAccountServiceProperties())
	if !m.GetPerAccountServiceProperties() {
		t.Error("the map does not say the master keeps properties per account")
	}

	// A snapshot an older build wrote has the one document only: it stays
	// the primary account's, and no other account has any.
	b, err := proto.Marshal(&pb.MasterSnapshot{NextTableId: 1, ServiceProperties: []byte("legacy")})
	if err != nil {
		t.Fatal(err)
	}
	var oldSnap pb.MasterSnapshot
	if err := proto.Unmarshal(b, &oldSnap); err != nil {
		t.Fatal(err)
	}
	o := stateFromSnapshot(&oldSnap)
	want("old snapshot", "legacy", nil, o.serviceProperties, o.accountProperties)
	// The primary account's set keeps the others'.
	set("", "primary2")
	want("after the primary's set", "primary2", others, s.fsm.st.serviceProperties, s.fsm.st.accountProperties)
	// The state a snapshot shares is replaced, never mutated.
	if string(r.accountProperties["accta"]) != "a2" {
		t.Fatal("a later set changed an earlier snapshot")
	}
	before := s.fsm.st.accountProperties
	set("acctc", "c1")
	if _, ok := before["acctc"]; ok {
		t.Fatal("a set mutated the map an earlier reader holds")
	}
}

// TestServicePropertiesKind: only the primary account's set keeps the kind
// older masters apply; another account's has the kind they skip.
func TestServicePropertiesKind(t *testing.T) {
	if k := servicePropertiesKind(""); k != pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_SERVICE_PROPERTIES {
		t.Errorf("primary: %v", k)
	}
	if k := servicePropertiesKind("acct1"); k != pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNT_SERVICE_PROPERTIES {
		t.Errorf("named: %v", k)
	}
}

func TestCheckServiceProperties(t *testing.T) {
	full := map[string][]byte{}
	for i := 0; i < maxAccounts; i++ {
		full[fmt.Sprintf("acct%d", i)] = []byte("x")
	}
	var fullRegistry []*pb.StorageAccount
	for a := range full {
		fullRegistry = append(fullRegistry, &pb.StorageAccount{Name: a})
	}
	fewServed := []*pb.StorageAccount{{Name: "acct1"}, {Name: "acctnew"}}
	tests := []struct {
		name     string
		account  string
		doc      []byte
		have     map[string][]byte
		registry []*pb.StorageAccount
		ok       bool
	}{
		{"primary", "", []byte("x"), nil, nil, true},
		{"named", "acct1", []byte("x"), nil, nil, true},
		{"upper case", "Acct1", []byte("x"), nil, nil, false},
		{"too short", "ab", []byte("x"), nil, nil, false},
		{"too large", "acct1", []byte(strings.Repeat("x", maxServicePropertiesDoc+1)), nil, nil, false},
		{"one account too many", "acctnew", []byte("x"), full, nil, false},
		{"one account too many, all served", "acctnew", []byte("x"), full, append(fullRegistry, &pb.StorageAccount{Name: "acctnew"}), false},
		{"replacing at the bound", "acct1", []byte("y"), full, nil, true},
		{"clearing at the bound", "acctnew", nil, full, nil, true},
		{"primary at the bound", "", []byte("x"), full, nil, true},
		{"unserved documents count for nothing", "acctnew", []byte("x"), full, fewServed, true},
		{"an account the registry does not serve", "acctgone", []byte("x"), nil, fewServed, false},
		{"together over the bound", "acct1", []byte(strings.Repeat("x", maxServicePropertiesDoc)),
			map[string][]byte{"acctnew": []byte(strings.Repeat("y", maxServicePropertiesTotal-maxServicePropertiesDoc+1))}, fewServed, false},
		{"together over the bound, the rest unserved", "acct1", []byte(strings.Repeat("x", maxServicePropertiesDoc)),
			map[string][]byte{"acctold": []byte(strings.Repeat("y", maxServicePropertiesTotal))}, fewServed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := checkServiceProperties(tt.account, tt.doc, tt.have, tt.registry); (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestSetServicePropertiesService goes through the gRPC service of a
// running master: the request's account reaches the map.
func TestSetServicePropertiesService(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Raft group")
	}
	s, svc := startPropsMaster(t)
	for _, req := range []*pb.SetServicePropertiesRequest{{Properties: []byte("p")}, {Account: "acct1", Properties: []byte("a")}} {
		if _, err := svc.SetServiceProperties(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.SetServiceProperties(context.Background(), &pb.SetServicePropertiesRequest{Account: "Bad!", Properties: []byte("a")}); err == nil {
		t.Fatal("a malformed account name was taken")
	}
	m := s.PartitionMap()
	if string(m.GetServiceProperties()) != "p" || string(m.GetAccountServiceProperties()["acct1"]) != "a" || len(m.GetAccountServiceProperties()) != 1 {
		t.Fatalf("map: %q %q", m.GetServiceProperties(), m.GetAccountServiceProperties())
	}
}
