package durable

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// recordSyncs makes the test record every directory synced.
func recordSyncs(t *testing.T) *[]string {
	t.Helper()
	var synced []string
	real := syncDir
	syncDir = func(dir string) error {
		synced = append(synced, dir)
		return real(dir)
	}
	t.Cleanup(func() { syncDir = real })
	return &synced
}

func TestMkdirAllSyncsTheParentOfEachCreated(t *testing.T) {
	synced := recordSyncs(t)
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b", "c")
	if err := MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("%s not created: %v", dir, err)
	}
	want := []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")}
	if !slices.Equal(*synced, want) {
		t.Fatalf("synced %q, want %q (the parent of each created directory, top down)", *synced, want)
	}
	*synced = nil
	if err := MkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	if len(*synced) != 0 {
		t.Fatalf("an existing directory synced %q", *synced)
	}
}

func TestWriteFileReplacesWholeAndSyncsTheDirectory(t *testing.T) {
	synced := recordSyncs(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "server-id")
	for _, content := range []string{"ps-1\n", "ps-22\n"} {
		if err := WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", fi.Mode().Perm())
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Fatalf("directory holds %d entries, want only the file (no temporary left)", len(des))
	}
	if !slices.Equal(*synced, []string{dir, dir}) {
		t.Fatalf("synced %q, want the directory after each write", *synced)
	}
}

func TestRemoveAllSyncsTheParent(t *testing.T) {
	synced := recordSyncs(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "7")
	if err := os.MkdirAll(filepath.Join(dir, "snapshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still there: %v", dir, err)
	}
	if err := RemoveAll(filepath.Join(parent, "missing", "x")); err != nil {
		t.Fatalf("removing under a missing directory: %v", err)
	}
	if !slices.Equal(*synced, []string{parent}) {
		t.Fatalf("synced %q, want %q", *synced, parent)
	}
	file := filepath.Join(parent, "raft.db")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	*synced = nil
	if err := Remove(file); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(*synced, []string{parent}) {
		t.Fatalf("Remove synced %q, want %q", *synced, parent)
	}
}
