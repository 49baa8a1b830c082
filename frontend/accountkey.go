package frontend

import (
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"strings"
)

// AccountKeyEnv is the environment variable a front-end reads its account
// key from when neither --account-key nor --account-key-file is given, so
// the key never has to appear on a command line (/proc/*/cmdline is
// world-readable).
const AccountKeyEnv = "TABLESTORE_ACCOUNT_KEY"

// KeySource is where the account key comes from besides --account-key.
type KeySource struct {
	// File holds the base64 key (surrounding whitespace ignored), e.g. a
	// mounted Kubernetes Secret.
	File string
	// flagGiven records an explicit --account-key (it beats the variable).
	flagGiven bool
}

// RegisterFlags binds --account-key-file and wraps --account-key (already
// registered on fs by Config.RegisterFlags) to notice an explicit value.
func (k *KeySource) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&k.File, "account-key-file", k.File, "file holding the base64 account key (beats --account-key and $"+AccountKeyEnv+")")
	if f := fs.Lookup("account-key"); f != nil {
		f.Value = &givenValue{f.Value, &k.flagGiven}
	}
}

// givenValue is a flag.Value that remembers it was set.
type givenValue struct {
	flag.Value
	given *bool
}

// String is safe on the zero value, which flag's help output builds.
func (g *givenValue) String() string {
	if g == nil || g.Value == nil {
		return ""
	}
	return g.Value.String()
}

func (g *givenValue) Set(s string) error { *g.given = true; return g.Value.Set(s) }

// Resolve sets c.AccountKey from, in order: --account-key-file, an explicit
// --account-key, $TABLESTORE_ACCOUNT_KEY, the default. getenv is os.Getenv
// outside tests.
func (k *KeySource) Resolve(c *Config, getenv func(string) string) error {
	src := "--account-key"
	switch {
	case k.File != "":
		b, err := os.ReadFile(k.File)
		if err != nil {
			return fmt.Errorf("frontend: --account-key-file: %w", err)
		}
		c.AccountKey, src = strings.TrimSpace(string(b)), "--account-key-file "+k.File
	case k.flagGiven:
	case getenv(AccountKeyEnv) != "":
		c.AccountKey, src = strings.TrimSpace(getenv(AccountKeyEnv)), "$"+AccountKeyEnv
	}
	if b, err := base64.StdEncoding.DecodeString(c.AccountKey); err != nil || len(b) == 0 {
		return fmt.Errorf("frontend: account key from %s is not non-empty base64", src)
	}
	return nil
}
