package partitionserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadOrCreateID: the id is generated once and kept; an empty file (an
// older build's crash mid-write: no id was used from it) counts as none;
// a configured id must match the stored one.
func TestLoadOrCreateID(t *testing.T) {
	dir := t.TempDir()
	id, err := loadOrCreateID(dir, "")
	if err != nil || !strings.HasPrefix(id, "ps-") {
		t.Fatalf("first id %q, %v", id, err)
	}
	if again, err := loadOrCreateID(dir, ""); err != nil || again != id {
		t.Fatalf("second load %q, %v; want %q", again, err, id)
	}
	if _, err := loadOrCreateID(dir, "other"); err == nil {
		t.Fatal("a configured id other than the stored one was accepted")
	}
	if err := os.WriteFile(filepath.Join(dir, "server-id"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := loadOrCreateID(dir, "ps9"); err != nil || got != "ps9" {
		t.Fatalf("empty file, configured ps9: %q, %v", got, err)
	}
	if got, err := loadOrCreateID(dir, ""); err != nil || got != "ps9" {
		t.Fatalf("after writing ps9: %q, %v", got, err)
	}
}
