// Package durable replaces small state files so that a crash at any moment leaves either the old content
// or the new one, on disk: the store's checkpoint and the record of the node settings Tandem changed both
// must survive a SIGKILL or a power loss whole, because the next start acts on them.
package durable

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempSuffix follows a file's name in the temporary files WriteFile makes beside it; a crash can leave
// one behind, which its owner may remove at start.
const TempSuffix = ".tmp-"

// WriteFile replaces path with data: written to a temporary file in the same directory, synced, renamed
// over path, and the directory synced so that the rename itself is on disk when it returns.
func WriteFile(path string, data []byte) (retErr error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+TempSuffix+"*")
	if err != nil {
		return fmt.Errorf("create a temporary file in %s: %w", dir, err)
	}
	defer func() {
		if retErr != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir makes a rename or a removal in dir durable; a directory that does not exist has nothing to sync.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// SaveJSON replaces path with v as indented JSON (making its directory), or removes path when empty is
// true: the shape of every record of original values Tandem keeps, where nothing left to restore must
// leave no file behind.
func SaveJSON(path string, v any, empty bool) error {
	dir := filepath.Dir(path)
	if empty {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return SyncDir(dir)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the state directory for %s: %w", path, err)
	}
	return WriteFile(path, append(b, '\n'))
}
