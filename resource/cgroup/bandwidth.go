package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// CPUMax is a CFS bandwidth limit: Quota microseconds of CPU time every Period microseconds. A Quota
// below zero is no limit (-1 in cpu.cfs_quota_us, "max" in cpu.max).
type CPUMax struct {
	Quota  int64
	Period int64
}

// Unlimited reports whether m sets no limit.
func (m CPUMax) Unlimited() bool { return m.Quota < 0 }

// Above reports whether m allows more CPU than limit: the comparison cgroup v1 makes between a child and
// its parent (kernel tg_cfs_schedulable_down), which refuses such a child with EINVAL. An unlimited m is
// never above: the kernel lets it inherit its parent's limit.
func (m CPUMax) Above(limit CPUMax) bool {
	if m.Unlimited() || limit.Unlimited() || m.Period <= 0 || limit.Period <= 0 {
		return false
	}
	// Cross-multiplied, on 128 bits: quotas up to the kernel's 2^44 µs times periods up to 10^6 µs do not
	// fit 64. The kernel's fixed-point ratios agree whenever the exact ones do.
	lh, ll := bits.Mul64(uint64(m.Quota), uint64(limit.Period))
	rh, rl := bits.Mul64(uint64(limit.Quota), uint64(m.Period))
	return lh > rh || lh == rh && ll > rl
}

// Under returns the quota, at period, that allows no more CPU than m (rounded down, so it is never
// Above it), and no more than the kernel's MaxQuota; -1 when m is unlimited.
func (m CPUMax) Under(period int64) int64 {
	if m.Unlimited() || m.Period <= 0 {
		return -1
	}
	return min(Scale(m.Quota, period, m.Period), MaxQuota)
}

// Tree reads the cgroups below a parent: what the suppress loop needs to keep cgroup v1's rule that no
// child has more CFS bandwidth than its parent, and to find BE containers left on a narrowed cpuset. The
// writers New returns implement it.
type Tree interface {
	// CPUMax reads a cgroup's CFS bandwidth; errdefs.ErrNotFound when the cgroup does not exist.
	CPUMax(parent string) (CPUMax, error)
	// Descendants lists the cgroups below parent in the hierarchy of controller ("cpu", "cpuset"; any
	// on cgroup v2), deepest first, each named so that Write and CPUMax accept it. A cgroup that
	// disappears during the walk is left out: pods come and go.
	Descendants(parent, controller string) ([]string, error)
	// ReadFile reads one file of a cgroup ("cpuset.cpus"), trimmed.
	ReadFile(parent, file string) (string, error)
}

var (
	_ Tree = (*v1)(nil)
	_ Tree = (*v2)(nil)
)

func (w *v1) CPUMax(parent string) (CPUMax, error) {
	q, err := w.ReadFile(parent, "cpu.cfs_quota_us")
	if err != nil {
		return CPUMax{}, err
	}
	p, err := w.ReadFile(parent, "cpu.cfs_period_us")
	if err != nil {
		return CPUMax{}, err
	}
	var m CPUMax
	if m.Quota, err = strconv.ParseInt(q, 10, 64); err != nil {
		return CPUMax{}, fmt.Errorf("cgroup %s: cpu.cfs_quota_us %q: %w", parent, q, err)
	}
	if m.Period, err = strconv.ParseInt(p, 10, 64); err != nil {
		return CPUMax{}, fmt.Errorf("cgroup %s: cpu.cfs_period_us %q: %w", parent, p, err)
	}
	return m, nil
}

func (w *v1) Descendants(parent, controller string) ([]string, error) {
	return descendants(filepath.Join(w.root, controller), Path(parent))
}

func (w *v1) ReadFile(parent, file string) (string, error) {
	ctrl, _, _ := strings.Cut(file, ".")
	return readFile(filepath.Join(w.root, ctrl, Path(parent), file))
}

func (w *v2) CPUMax(parent string) (CPUMax, error) {
	s, err := w.ReadFile(parent, "cpu.max")
	if err != nil {
		return CPUMax{}, err
	}
	q, p, ok := strings.Cut(s, " ")
	if !ok {
		return CPUMax{}, fmt.Errorf("cgroup %s: cpu.max %q is not \"<quota> <period>\"", parent, s)
	}
	m := CPUMax{Quota: -1}
	if m.Period, err = strconv.ParseInt(p, 10, 64); err != nil {
		return CPUMax{}, fmt.Errorf("cgroup %s: cpu.max period %q: %w", parent, p, err)
	}
	if q != "max" {
		if m.Quota, err = strconv.ParseInt(q, 10, 64); err != nil {
			return CPUMax{}, fmt.Errorf("cgroup %s: cpu.max quota %q: %w", parent, q, err)
		}
	}
	return m, nil
}

func (w *v2) Descendants(parent, _ string) ([]string, error) {
	return descendants(w.root, Path(parent))
}

func (w *v2) ReadFile(parent, file string) (string, error) {
	return readFile(filepath.Join(w.root, Path(parent), file))
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(filepath.Dir(p)); errors.Is(serr, fs.ErrNotExist) {
			return "", fmt.Errorf("cgroup %s does not exist: %w", filepath.Dir(p), errdefs.ErrNotFound)
		}
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// descendants walks hierarchy/rel and returns the directories below rel, as paths relative to the
// hierarchy, deepest first (so that lowering limits in that order never puts a child above its parent).
func descendants(hierarchy, rel string) ([]string, error) {
	top := filepath.Join(hierarchy, rel)
	if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cgroup %s does not exist: %w", top, errdefs.ErrNotFound)
	}
	var out []string
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() || p == top {
			return nil
		}
		r, err := filepath.Rel(hierarchy, p)
		if err != nil {
			return err
		}
		out = append(out, "/"+r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the cgroups below %s: %w", top, err)
	}
	// Deepest first; among equals, by name, so the order is stable.
	slices.SortStableFunc(out, func(a, b string) int {
		if da, db := strings.Count(a, "/"), strings.Count(b, "/"); da != db {
			return db - da
		}
		return strings.Compare(a, b)
	})
	return out, nil
}
