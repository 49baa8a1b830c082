package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// syncDir fsyncs a directory; a variable so tests can see which are synced.
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// SyncDir fsyncs dir, making the entries created, renamed or removed in it
// durable.
func SyncDir(dir string) error {
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("durable: sync directory %s: %w", dir, err)
	}
	return nil
}

// MkdirAll creates dir and any missing directory above it (mode 0755), and
// syncs the parent of each one it created, deepest last: until then a
// crash could lose a directory with every file synced inside it.
func MkdirAll(dir string) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := SyncDir(filepath.Dir(created[i])); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes data to path so that a crash leaves either the old file
// (or none) or the whole new one: a temporary file in the same directory,
// synced, renamed over path, and the directory synced.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// Remove removes the file or empty directory path and syncs its directory:
// a removal a crash undoes can bring back what a later step relies on
// being gone (a re-imported log, a dropped replica's snapshots).
func Remove(path string) error {
	if err := os.Remove(path); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(path))
}

// RemoveAll removes path and everything under it, then syncs the directory
// that held it (its entry is what a crash would bring back). A path that
// does not exist is not an error, as with os.RemoveAll.
func RemoveAll(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return err
	}
	parent := filepath.Dir(path)
	if _, err := os.Stat(parent); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return SyncDir(parent)
}
