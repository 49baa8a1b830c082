package master

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// TestSetAccounts applies the command, checks that the registry survives a
// snapshot and that a later command replaces it whole.
func TestSetAccounts(t *testing.T) {
	s := newState()
	apply := func(accts ...*pb.StorageAccount) {
		t.Helper()
		payload, err := proto.Marshal(&pb.SetAccountsCommand{Accounts: accts})
		if err != nil {
			t.Fatal(err)
		}
		if res := handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS](s, payload); res.err != nil {
			t.Fatal(res.err)
		}
	}
	apply(&pb.StorageAccount{Name: "acct1", Keys: [][]byte{[]byte("k1"), []byte("k2")}}, &pb.StorageAccount{Name: "acct2", Keys: [][]byte{[]byte("k3")}})
	restored := stateFromSnapshot(s.snapshot())
	if got := restored.accounts; len(got) != 2 || got[0].GetName() != "acct1" || len(got[0].GetKeys()) != 2 || string(got[1].GetKeys()[0]) != "k3" {
		t.Fatalf("after snapshot: %v", got)
	}
	apply(&pb.StorageAccount{Name: "acct3", Keys: [][]byte{[]byte("k4")}})
	if len(s.accounts) != 1 || s.accounts[0].GetName() != "acct3" {
		t.Fatalf("not replaced: %v", s.accounts)
	}
	if res := handlers[pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS](s, []byte{0xff}); res.err == nil {
		t.Fatal("a malformed command applied")
	}
}

func TestValidateAccounts(t *testing.T) {
	key := [][]byte{[]byte("k")}
	tests := []struct {
		name  string
		accts []*pb.StorageAccount
		ok    bool
	}{
		{"none", nil, true},
		{"two keys", []*pb.StorageAccount{{Name: "acct1", Keys: [][]byte{[]byte("a"), []byte("b")}}}, true},
		{"upper case", []*pb.StorageAccount{{Name: "Acct1", Keys: key}}, false},
		{"too short", []*pb.StorageAccount{{Name: "ab", Keys: key}}, false},
		{"no key", []*pb.StorageAccount{{Name: "acct1"}}, false},
		{"three keys", []*pb.StorageAccount{{Name: "acct1", Keys: [][]byte{[]byte("a"), []byte("b"), []byte("c")}}}, false},
		{"empty key", []*pb.StorageAccount{{Name: "acct1", Keys: [][]byte{{}}}}, false},
		{"twice", []*pb.StorageAccount{{Name: "acct1", Keys: key}, {Name: "acct1", Keys: key}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := validateAccounts(tc.accts); (err == nil) != tc.ok {
				t.Fatalf("validateAccounts = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
