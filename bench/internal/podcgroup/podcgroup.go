// Package podcgroup makes and removes cgroups as kubelet makes them for pods (and for the QoS parents
// above them) before RunPodSandbox, on cgroup v1 and v2, for the benchmarks that run pods without a
// kubelet. Every benchmark keeps its cgroups under a private root, so that the node's own /kubepods is
// never touched.
package podcgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FS is where the cgroup hierarchies are mounted.
const FS = "/sys/fs/cgroup"

// v1Controllers are the hierarchies kubelet creates a pod's cgroup in on cgroup v1.
var v1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "hugetlb"}

// V2 reports whether the host runs the unified hierarchy.
func V2() bool {
	_, err := os.Stat(filepath.Join(FS, "cgroup.controllers"))
	return err == nil
}

// SharesToWeight is kubelet's conversion of cgroup v1 shares to a v2 weight: 1 + (shares−2)·9999/262142.
// It is not the runtime's (resource/cgroup.SharesToWeight): what kubelet writes for a pod is what the
// benchmarks stand in for.
func SharesToWeight(shares int64) int64 { return 1 + (shares-2)*9999/262142 }

// Make creates path in every hierarchy and, when shares is positive, sets its cpu.shares (v1) or the
// matching cpu.weight (v2): kubelet gives a Burstable pod the sum of its requests, BestEffort 2.
func Make(path string, shares int64) error {
	if V2() {
		dir := filepath.Join(FS, path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for d := filepath.Dir(dir); len(d) > len(FS); d = filepath.Dir(d) {
			// Children get the controllers only if every ancestor delegates them.
			_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+cpu +cpuset +memory +pids"), 0)
		}
		if shares <= 0 {
			return nil
		}
		return writeFile(filepath.Join(dir, "cpu.weight"), SharesToWeight(shares))
	}
	for _, c := range v1Controllers {
		base := filepath.Join(FS, c)
		if _, err := os.Stat(base); err != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Join(base, path), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s in %s: %w", path, c, err)
		}
	}
	if shares <= 0 {
		return nil
	}
	return writeFile(filepath.Join(FS, "cpu", path, "cpu.shares"), shares)
}

func writeFile(path string, value int64) error {
	if err := os.WriteFile(path, []byte(strconv.FormatInt(value, 10)), 0); err != nil {
		return fmt.Errorf("set %s: %w", path, err)
	}
	return nil
}

// CPUWeight reads a container's CPU weight, as shares on v1 or a weight on v2, with the value shares
// would give there, so that the caller compares like with like.
func CPUWeight(parent, id string, shares int64) (got, want int64, err error) {
	file, want := filepath.Join(FS, "cpu", parent, id, "cpu.shares"), shares
	if V2() {
		file, want = filepath.Join(FS, parent, id, "cpu.weight"), SharesToWeight(shares)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, want, fmt.Errorf("read container cgroup: %w", err)
	}
	got, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, want, fmt.Errorf("parse %s: %w", file, err)
	}
	return got, want, nil
}

// CPUUsage is the CPU time a cgroup (a path such as /tdm-coloc-1/kubepods/besteffort/pod…) and its
// descendants have used.
func CPUUsage(path string) (time.Duration, error) {
	if V2() {
		b, err := os.ReadFile(filepath.Join(FS, path, "cpu.stat"))
		if err != nil {
			return 0, fmt.Errorf("read CPU usage of cgroup %s: %w", path, err)
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "usage_usec "); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse usage_usec of cgroup %s: %w", path, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
		return 0, fmt.Errorf("cgroup %s: no usage_usec in cpu.stat", path)
	}
	b, err := os.ReadFile(filepath.Join(FS, "cpuacct", path, "cpuacct.usage"))
	if err != nil {
		return 0, fmt.Errorf("read CPU usage of cgroup %s: %w", path, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cpuacct.usage of cgroup %s: %w", path, err)
	}
	return time.Duration(ns), nil
}

// RemoveTree removes path and every cgroup below it in every hierarchy, deepest first (a cgroup can only
// be removed once it has no children and no tasks). It fails if any remains.
func RemoveTree(path string) error {
	hierarchies, _ := filepath.Glob(filepath.Join(FS, "*"))
	hierarchies = append(hierarchies, FS) // v2's single hierarchy
	var errs []error
	for _, h := range hierarchies {
		top := filepath.Join(h, path)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			if err := removeDir(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeDir removes one empty cgroup. One whose last task has just exited may refuse (EBUSY) for a
// moment.
func removeDir(d string) error {
	var err error
	for range 20 {
		if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", d, err)
}

// Own is the cgroup this process is in, in the cpu hierarchy (v1) or the unified one.
func Own() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "?"
	}
	unified := "?"
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "cpu") {
			return parts[2]
		}
		if parts[1] == "" {
			unified = parts[2]
		}
	}
	return unified
}
