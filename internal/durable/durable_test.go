package durable

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteFile: the file holds the new content whole, no temporary file stays beside it, and a
// directory that cannot take the file is an error naming it, with the old content kept.
func TestWriteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{`{"v":1}`, `{"v":2}`} {
		if err := WriteFile(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("after writing %s: %q, %v", content, b, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*"+TempSuffix+"*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "state.json"), []byte("x")); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err != nil {
		t.Fatalf("SyncDir of a missing directory: %v", err)
	}
}
