package main

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

// cgroupFS is where the cgroup hierarchies are mounted.
const cgroupFS = "/sys/fs/cgroup"

// v1Controllers are the hierarchies kubelet creates a pod's cgroup in on cgroup v1.
var v1Controllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer"}

func cgroupV2() bool {
	_, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers"))
	return err == nil
}

// cpuUsage is the CPU time a cgroup (a path such as /tdm-coloc-1/kubepods/besteffort/pod…) and its
// descendants have used.
func cpuUsage(path string) (time.Duration, error) {
	if cgroupV2() {
		b, err := os.ReadFile(filepath.Join(cgroupFS, path, "cpu.stat"))
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
	b, err := os.ReadFile(filepath.Join(cgroupFS, "cpuacct", path, "cpuacct.usage"))
	if err != nil {
		return 0, fmt.Errorf("read CPU usage of cgroup %s: %w", path, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse cpuacct.usage of cgroup %s: %w", path, err)
	}
	return time.Duration(ns), nil
}

// sumUsage is the CPU time of several cgroups together.
func sumUsage(paths []string) (time.Duration, error) {
	var total time.Duration
	for _, p := range paths {
		u, err := cpuUsage(p)
		if err != nil {
			return 0, err
		}
		total += u
	}
	return total, nil
}

// makeCgroup creates path in every hierarchy, as kubelet creates a pod's cgroup (and the QoS
// parents) before RunPodSandbox, and sets its cpu.shares (v1) or the matching cpu.weight (v2) when
// shares is positive: kubelet gives a Burstable pod the sum of its requests, BestEffort 2.
func makeCgroup(path string, shares int64) error {
	if cgroupV2() {
		dir := filepath.Join(cgroupFS, path)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		for d := filepath.Dir(dir); len(d) > len(cgroupFS); d = filepath.Dir(d) {
			// Children get the cpu controller only if every ancestor delegates it.
			_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+cpu +cpuset +memory +pids"), 0)
		}
		if shares > 0 {
			// kubelet's conversion: weight = 1 + (shares−2)·9999/262142.
			w := 1 + (shares-2)*9999/262142
			if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(strconv.FormatInt(w, 10)), 0); err != nil {
				return fmt.Errorf("set cpu.weight of %s: %w", dir, err)
			}
		}
		return nil
	}
	for _, c := range v1Controllers {
		base := filepath.Join(cgroupFS, c)
		if _, err := os.Stat(base); err != nil {
			continue
		}
		if err := os.MkdirAll(filepath.Join(base, path), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s in %s: %w", path, c, err)
		}
	}
	if shares > 0 {
		f := filepath.Join(cgroupFS, "cpu", path, "cpu.shares")
		if err := os.WriteFile(f, []byte(strconv.FormatInt(shares, 10)), 0); err != nil {
			return fmt.Errorf("set %s: %w", f, err)
		}
	}
	return nil
}

// removeCgroupTree removes path and every cgroup below it in every hierarchy, deepest first (a
// cgroup can only be removed once it has no children and no tasks). It fails if any remains.
func removeCgroupTree(path string) error {
	hierarchies, _ := filepath.Glob(filepath.Join(cgroupFS, "*"))
	hierarchies = append(hierarchies, cgroupFS) // v2's single hierarchy
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
			var err error
			// A cgroup whose last task has just exited may refuse removal (EBUSY) for a moment.
			for try := 0; try < 20; try++ {
				if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// ownCgroup is the cgroup this process is in, in the cpu hierarchy (v1) or the unified one.
func ownCgroup() string {
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
