package frontend

import (
	"context"
	"fmt"
	"strings"

	"tablestore/frontend/auth"
	pb "tablestore/proto/tablestorepb"
)

// AccountsEnv is the environment variable that, as for Azurite, lists the
// accounts to serve (the default of Config.Accounts' flag).
const AccountsEnv = "AZURITE_ACCOUNTS"

// ParseAccounts reads Azurite's AZURITE_ACCOUNTS form:
// "account1:key1:key2;account2:key1" — accounts separated by ';', each a
// name and one or two base64 keys separated by ':'. Empty entries are
// skipped. Unlike Azurite, which falls back to devstoreaccount1 on a bad
// value, a bad value is an error naming the entry, so a typo cannot
// silently lock users out.
func ParseAccounts(v string) ([]auth.Account, error) {
	var out []auth.Account
	seen := map[string]bool{}
	for entry := range strings.SplitSeq(strings.TrimSpace(v), ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		parts := strings.Split(entry, ":")
		if len(parts) < 2 || len(parts) > 3 {
			return nil, fmt.Errorf("frontend: accounts entry %q: want name:key1[:key2]", redactKeys(entry))
		}
		name := parts[0]
		if !validAccountName(name) {
			return nil, fmt.Errorf("frontend: accounts entry for %q: account names are 3-24 lowercase letters and digits", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("frontend: accounts: %q appears twice", name)
		}
		seen[name] = true
		for i, k := range parts[1:] {
			a, err := auth.NewAccount(name, k)
			if err != nil {
				return nil, fmt.Errorf("frontend: accounts: key %d of %q is not base64", i+1, name)
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// redactKeys keeps an account entry's name for an error message.
func redactKeys(entry string) string {
	name, _, _ := strings.Cut(entry, ":")
	return name + ":…"
}

// servedAccounts lists the accounts and keys a server accepts: those of
// Accounts when set (Azurite replaces its default account the same way),
// else AccountName with AccountKey.
func (c *Config) servedAccounts() ([]auth.Account, error) {
	if strings.TrimSpace(c.Accounts) != "" {
		accts, err := ParseAccounts(c.Accounts)
		if err != nil || len(accts) > 0 {
			return accts, err
		}
	}
	a, err := auth.NewAccount(c.AccountName, c.AccountKey)
	if err != nil {
		return nil, fmt.Errorf("frontend: %w", err)
	}
	return []auth.Account{a}, nil
}

// Endpoint returns the account a client should be pointed at first (for a
// printed connection string): AccountName when served, else the first of
// Accounts, with its first key in base64.
func (c *Config) Endpoint() (account, base64Key string) {
	accts, err := c.servedAccounts()
	if err != nil || len(accts) == 0 {
		return c.AccountName, c.AccountKey
	}
	for _, a := range accts {
		if a.Name == c.AccountName {
			return a.Name, a.Base64Key()
		}
	}
	return accts[0].Name, accts[0].Base64Key()
}

// Scheme is "https" when the server serves TLS, else "http".
func (c *Config) Scheme() string {
	if c.CertFile != "" {
		return "https"
	}
	return "http"
}

// authState is what authenticating a request needs: the accounts served
// and an authenticator for their keys.
type authState struct {
	auth     *auth.Authenticator
	accounts map[string]bool
	src      []*pb.StorageAccount // the registry it was built from; nil: configuration
}

func (s *Server) newAuthState(accts []auth.Account, src []*pb.StorageAccount) *authState {
	st := &authState{accounts: map[string]bool{}, src: src}
	for _, a := range accts {
		st.accounts[a.Name] = true
	}
	st.auth = auth.NewAuthenticator(accts[0], auth.Options{
		ClockSkew: s.cfg.ClockSkew,
		Policies:  policyLookup{backend: s.backend, timeout: s.cfg.RequestTimeout, tableID: s.tableID},
		Accounts:  accts[1:],
		OAuth:     s.cfg.OAuth == "basic",
	})
	return st
}

// currentAuth returns the accounts in force: the master's registry when
// the backend keeps one and it is not empty, else this front-end's
// configuration (Config.Accounts, or AccountName with AccountKey).
func (s *Server) currentAuth() *authState {
	reg, ok := s.backend.(AccountRegistry)
	if !ok {
		return s.configured
	}
	src := reg.RegisteredAccounts()
	if len(src) == 0 {
		return s.configured
	}
	if cur := s.registered.Load(); cur != nil && len(cur.src) == len(src) && &cur.src[0] == &src[0] {
		return cur
	}
	var accts []auth.Account
	for _, a := range src {
		for _, k := range a.GetKeys() {
			accts = append(accts, auth.Account{Name: a.GetName(), Key: k})
		}
	}
	if len(accts) == 0 {
		return s.configured
	}
	st := s.newAuthState(accts, src)
	s.registered.Store(st)
	return st
}

// PublishAccounts stores this front-end's Config.Accounts in the master's
// registry, so that every front-end serves them; it does nothing when
// Accounts is not set or the backend keeps no registry. As with Azurite's
// AZURITE_ACCOUNTS, the list replaces the accounts served before.
func (s *Server) PublishAccounts(ctx context.Context) error {
	reg, ok := s.backend.(AccountRegistry)
	if !ok || strings.TrimSpace(s.cfg.Accounts) == "" {
		return nil
	}
	accts, err := ParseAccounts(s.cfg.Accounts)
	if err != nil {
		return err
	}
	var out []*pb.StorageAccount
	for _, a := range accts {
		if n := len(out); n > 0 && out[n-1].GetName() == a.Name {
			out[n-1].Keys = append(out[n-1].Keys, a.Key)
			continue
		}
		out = append(out, &pb.StorageAccount{Name: a.Name, Keys: [][]byte{a.Key}})
	}
	if err := reg.SetAccounts(ctx, out); err != nil {
		return fmt.Errorf("frontend: publishing accounts to the master: %w", err)
	}
	return nil
}
