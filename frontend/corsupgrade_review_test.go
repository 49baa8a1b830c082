package frontend

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestUpgradeSharedDocumentReachable (review): the usual several-account
// cluster sets AZURITE_ACCOUNTS and leaves --account-name at its default,
// devstoreaccount1, which is then not served. Before per-account
// properties every account read the one stored document (the backend's
// unnamed one); after the upgrade only the --account-name account reads it,
// and that account is served by no front-end. Every account loses its
// CORS rules at once, and the remedy docs/operations.md gives ("Get the
// primary account's properties and Set them with that account's
// credentials") cannot be done: no request reaches the document.
func TestUpgradeSharedDocumentReachable(t *testing.T) {
	cfg := DefaultConfig() // AccountName devstoreaccount1, not among Accounts
	cfg.Accounts = "acctone:" + acctOneKey + ";accttwo:" + acctTwoKey
	fb := newFakeBackend()
	fb.serviceProps = map[string][]byte{"": []byte(acctOneRules)} // the document every account read before
	s, err := NewServer(cfg, fb, nil)
	if err != nil {
		t.Fatal(err)
	}
	reachable := false
	for _, a := range []struct{ name, key string }{{"acctone", acctOneKey}, {"accttwo", acctTwoKey}} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, accountRequest(t, "GET", a.name, a.key, "/?restype=service&comp=properties", ""))
		if rec.Code != http.StatusOK {
			t.Fatalf("get %s: %d %s", a.name, rec.Code, rec.Body)
		}
		reachable = reachable || strings.Contains(rec.Body.String(), "http://one.example")
	}
	if !reachable {
		t.Error("no served account reads the document all of them shared before the upgrade")
	}
}
