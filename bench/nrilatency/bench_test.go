package main

import "testing"

// Each path's containerd and Tandem live in a directory of their own: two daemons in one would share a
// socket, and the measurement would cross paths.
func TestDirLetter(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, p := range allPaths() {
		d := dirLetter(p)
		if d == "" {
			t.Errorf("path %s has no directory", p)
		}
		if other, ok := seen[d]; ok {
			t.Errorf("paths %s and %s share directory %q", other, p, d)
		}
		seen[d] = p
	}
}
