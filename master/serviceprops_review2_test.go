package master

import (
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// propsServer is a master without Raft: the FSM applied directly, with
// the map watchers of a leader.
func propsServer(t *testing.T) (*Server, func(pb.MasterCommandKind, *pb.SetAccountsCommand), func(account, doc string)) {
	t.Helper()
	s := &Server{cfg: DefaultConfig(), reports: newReports(), changed: make(chan struct{}), watchers: map[*mapWatcher]struct{}{}, epoch: 1}
	s.fsm = &fsm{st: newState(), onChange: s.bumpChanges}
	apply := applier(t, s.fsm)
	accounts := func(kind pb.MasterCommandKind, c *pb.SetAccountsCommand) {
		t.Helper()
		if res := apply(kind, c); res.err != nil {
			t.Fatal(res.err)
		}
	}
	set := func(account, doc string) {
		t.Helper()
		if res := apply(servicePropertiesKind(account), &pb.SetServicePropertiesCommand{Account: account, Properties: []byte(doc)}); res.err != nil {
			t.Fatal(res.err)
		}
	}
	return s, accounts, set
}

func registry(names ...string) *pb.SetAccountsCommand {
	c := &pb.SetAccountsCommand{}
	for _, n := range names {
		c.Accounts = append(c.Accounts, &pb.StorageAccount{Name: n, Keys: [][]byte{[]byte("k")}})
	}
	return c
}

// TestAccountPropertiesSurviveRegistryRollout (review 2): every front-end
// publishes its AZURITE_ACCOUNTS at start (PublishAccounts; the list
// replaces the registry), so during a rolling change of the list that adds
// account "newacct", a front-end still on the old list that restarts
// (a crash, the rollout's own order) publishes the list without it for a
// while. forgetUnservedProperties (091c446) then drops newacct's CORS
// rules and logging settings for good at that apply: when the new list is
// published again, newacct is served with the defaults (or the legacy
// document), its tenant's browser clients refused. Before 091c446 the
// document came back with the account. A transient, ordinary registry
// change destroys tenant data irrecoverably.
func TestAccountPropertiesSurviveRegistryRollout(t *testing.T) {
	s, accounts, set := propsServer(t)
	kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS
	accounts(kind, registry("acctone", "newacct")) // the first front-end on the new list
	set("newacct", "<StorageServiceProperties><Cors>rules</Cors></StorageServiceProperties>")
	accounts(kind, registry("acctone"))            // a front-end still on the old list restarts
	accounts(kind, registry("acctone", "newacct")) // and is rolled onto the new one
	if got := string(s.fsm.st.accountProperties["newacct"]); got == "" {
		t.Fatal("newacct's service properties were lost by a front-end on the old account list restarting during the rollout")
	}
}

// TestLeaderChangeDeltaCarriesNoAccountDocuments (review 2): 091c446 says
// a leader change no longer resends every account's document, and its test
// calls partitionDelta with an empty changeSet. But every leader change
// reaches the watchers through Server.bump (setLeader, the heartbeat's
// reports, a range's start), which records changeSet{other: true}: the
// watcher's delta of a leader change carries all accounts' documents (up
// to 2 MiB) to every front-end, as before.
func TestLeaderChangeDeltaCarriesNoAccountDocuments(t *testing.T) {
	s, _, set := propsServer(t)
	set("acctone", "<StorageServiceProperties/>")
	w := s.addWatcher()
	defer s.removeWatcher(w)
	s.take(w) // what the whole map at the watch's start covered
	s.setLeader(7, "ps1")
	cs, leaders, _, _, version := s.take(w)
	if len(leaders) == 0 {
		t.Fatal("the leader change reached no watcher")
	}
	if d := s.partitionDelta(cs, leaders, version); d.GetAccountServicePropertiesCarried() || len(d.GetAccountServiceProperties()) > 0 {
		t.Fatalf("a leader change's delta carries %d accounts' documents (carried=%v)", len(d.GetAccountServiceProperties()), d.GetAccountServicePropertiesCarried())
	}
}

// TestMapCarriesServedAccountsDocuments: the map carries the documents of
// the accounts the registry serves; one no longer served is kept (it
// comes back with its account) but not sent, and a registry change's
// delta carries the documents again.
func TestMapCarriesServedAccountsDocuments(t *testing.T) {
	s, accounts, set := propsServer(t)
	kind := pb.MasterCommandKind_MASTER_COMMAND_KIND_SET_ACCOUNTS
	accounts(kind, registry("acctone", "accttwo"))
	set("acctone", "one")
	set("accttwo", "two")
	w := s.addWatcher()
	defer s.removeWatcher(w)
	s.take(w)
	accounts(kind, registry("acctone"))
	if m := s.PartitionMap().GetAccountServiceProperties(); len(m) != 1 || string(m["acctone"]) != "one" {
		t.Fatalf("the map carries %v, want acctone's document alone", m)
	}
	cs, leaders, _, _, version := s.take(w)
	if d := s.partitionDelta(cs, leaders, version); !d.GetAccountServicePropertiesCarried() || len(d.GetAccountServiceProperties()) != 1 {
		t.Fatalf("the registry change's delta carries %v (carried %v), want acctone's document", d.GetAccountServiceProperties(), d.GetAccountServicePropertiesCarried())
	}
	accounts(kind, registry("acctone", "accttwo"))
	if m := s.PartitionMap().GetAccountServiceProperties(); string(m["accttwo"]) != "two" {
		t.Fatalf("accttwo served again reads %q, want its document back", m["accttwo"])
	}
}
