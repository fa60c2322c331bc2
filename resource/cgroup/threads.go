package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Threads lists the thread IDs in one cgroup directory (not below it): "cgroup.threads" on cgroup v2,
// "tasks" on v1. dir is a directory of the hierarchy, e.g. /sys/fs/cgroup/cpu/kubepods/besteffort.
func Threads(dir string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.threads"))
	if errors.Is(err, fs.ErrNotExist) {
		b, err = os.ReadFile(filepath.Join(dir, "tasks"))
	}
	if err != nil {
		return nil, fmt.Errorf("list the threads of cgroup %s: %w", dir, err)
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		tid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: thread id %q: %w", dir, f, err)
		}
		out = append(out, tid)
	}
	return out, nil
}
