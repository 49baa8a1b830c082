package frontend

import (
	"fmt"
	"strings"

	"tablestore/frontend/auth"
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
