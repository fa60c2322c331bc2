package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestThreads(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                []int
		ok                  bool
	}{
		{"v1 tasks", "tasks", "12\n13\n", []int{12, 13}, true},
		{"v2 cgroup.threads", "cgroup.threads", "7\n", []int{7}, true},
		{"empty", "tasks", "", nil, true},
		{"not a number", "tasks", "12\nx\n", nil, false},
		{"no file", "", "", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Threads(dir)
			if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
				t.Fatalf("Threads() = %v, %v; want %v, ok=%v", got, err, tc.want, tc.ok)
			}
		})
	}
}
