package frontend

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeySource(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	os.WriteFile(good, []byte("ZmlsZWtleQ==\n"), 0o600)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("not base64!"), 0o600)
	for _, tc := range []struct {
		name    string
		args    []string
		env     string
		want    string
		wantErr string
	}{
		{"default", nil, "", DefaultConfig().AccountKey, ""},
		{"env", nil, "ZW52a2V5", "ZW52a2V5", ""},
		{"flag beats env", []string{"--account-key=ZmxhZ2tleQ=="}, "ZW52a2V5", "ZmxhZ2tleQ==", ""},
		{"file beats all", []string{"--account-key=ZmxhZ2tleQ==", "--account-key-file=" + good}, "ZW52a2V5", "ZmlsZWtleQ==", ""},
		{"missing file", []string{"--account-key-file=" + filepath.Join(dir, "nope")}, "", "", "--account-key-file: open " + filepath.Join(dir, "nope")},
		{"bad file", []string{"--account-key-file=" + bad}, "", "", "account key from --account-key-file " + bad + " is not non-empty base64"},
		{"bad env", nil, "???", "", "account key from $TABLESTORE_ACCOUNT_KEY is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			var ks KeySource
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			cfg.RegisterFlags(fs)
			ks.RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := ks.Resolve(&cfg, func(k string) string {
				if k == AccountKeyEnv {
					return tc.env
				}
				return ""
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg.AccountKey != tc.want {
				t.Fatalf("key %q, err %v; want %q", cfg.AccountKey, err, tc.want)
			}
		})
	}
}
