package framework

import (
	"fmt"
	"os"
)

// OpenTempDir makes a temporary directory any user may enter (os.MkdirTemp's are 0700), for a binary
// a test runs as another user. The caller removes it.
func OpenTempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("make a temporary directory: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("open %s to every user: %w", dir, err)
	}
	return dir, nil
}
