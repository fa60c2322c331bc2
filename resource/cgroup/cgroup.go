// Package cgroup writes resource settings into cgroup files, on cgroup v1 (one hierarchy per controller,
// as on hybrid hosts) and on cgroup v2 (the unified hierarchy). Tandem needs it for what CRI has no call
// for: pod-level cgroups, which kubelet creates and the runtime never touches.
//
// The root is a constructor argument so tests run against a fake tree; production passes /sys/fs/cgroup.
package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// Settings are the values to write; nil fields are left alone. Files holds further files by name
// ("cpu.idle", "memory.high"), written as they are.
type Settings struct {
	CPUShares   *int64
	CPUQuota    *int64
	CPUPeriod   *int64
	CpusetCpus  *string
	CpusetMems  *string
	MemoryLimit *int64
	Files       map[string]string
}

// Prober tells what the hierarchy is and offers: all a policy may know of the node's cgroups, since the
// front end, not the policy, writes them.
type Prober interface {
	// Version is 1 or 2.
	Version() int
	// Supports reports whether the kernel offers a cgroup file ("cpu.idle", "cpu.cfs_burst_us"), so a
	// policy can switch itself off with one log line instead of failing every pod.
	Supports(file string) bool
}

// Writer writes settings into a cgroup named as kubelet names a pod's cgroup parent.
type Writer interface {
	Prober
	// Write applies s to the cgroup; it fails with errdefs.ErrNotFound when the cgroup does not exist.
	Write(parent string, s Settings) error
}

// New detects the hierarchy under root: cgroup v2 when root has cgroup.controllers, else v1.
func New(root string) (Writer, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return &v2{root: root}, nil
	}
	if fi, err := os.Stat(filepath.Join(root, "cpu")); err == nil && fi.IsDir() {
		return &v1{root: root}, nil
	}
	return nil, fmt.Errorf("no cgroup hierarchy under %s (neither cgroup.controllers nor cpu/): %w", root, errdefs.ErrNotFound)
}

// Path turns a cgroup parent into a path relative to the hierarchy. cgroupfs parents are paths already;
// a systemd slice name expands to its nested slices, as systemd lays them out
// (kubepods-besteffort-pod1.slice → kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice).
func Path(parent string) string {
	if !strings.HasSuffix(parent, ".slice") || strings.Contains(parent, "/") {
		return filepath.Clean("/" + parent)
	}
	name := strings.TrimSuffix(parent, ".slice")
	parts := strings.Split(name, "-")
	p := "/"
	for i := range parts {
		p = filepath.Join(p, strings.Join(parts[:i+1], "-")+".slice")
	}
	return p
}

type v1 struct{ root string }

func (w *v1) Version() int { return 1 }

func (w *v1) Supports(file string) bool {
	ctrl, _, _ := strings.Cut(file, ".")
	return existsHere(filepath.Join(w.root, ctrl), file)
}

func (w *v1) Write(parent string, s Settings) error {
	files := map[string]string{}
	setInt(files, "cpu.shares", s.CPUShares)
	setInt(files, "cpu.cfs_period_us", s.CPUPeriod)
	setInt(files, "cpu.cfs_quota_us", s.CPUQuota)
	setInt(files, "memory.limit_in_bytes", s.MemoryLimit)
	setStr(files, "cpuset.cpus", s.CpusetCpus)
	setStr(files, "cpuset.mems", s.CpusetMems)
	for k, v := range s.Files {
		files[k] = v
	}
	rel := Path(parent)
	return writeAll(files, func(name string) string {
		// On v1 each file lives in the hierarchy of the controller its prefix names.
		ctrl, _, _ := strings.Cut(name, ".")
		return filepath.Join(w.root, ctrl, rel, name)
	})
}

type v2 struct{ root string }

func (w *v2) Version() int { return 2 }

// Supports looks below the root too: the root cgroup lacks many files its children have (cpu.idle).
func (w *v2) Supports(file string) bool { return existsHere(w.root, file) }

// existsHere looks for a cgroup file in a hierarchy's root and, failing that, in the cgroups right below
// it: the kernel hides many files from the root cgroup (cgroup v2's memory.min and cpu.idle; Anolis's
// memory.wmark_ratio on v1), which pods' cgroups (kubepods) have.
func existsHere(root, file string) bool {
	if exists(filepath.Join(root, file)) {
		return true
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.IsDir() && exists(filepath.Join(root, e.Name(), file)) {
			return true
		}
	}
	return false
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (w *v2) Write(parent string, s Settings) error {
	files := map[string]string{}
	if s.CPUShares != nil {
		files["cpu.weight"] = strconv.FormatInt(SharesToWeight(*s.CPUShares), 10)
	}
	if s.CPUQuota != nil || s.CPUPeriod != nil {
		period := int64(100000)
		if s.CPUPeriod != nil && *s.CPUPeriod > 0 {
			period = *s.CPUPeriod
		}
		quota := "max"
		if s.CPUQuota != nil && *s.CPUQuota > 0 {
			quota = strconv.FormatInt(*s.CPUQuota, 10)
		}
		files["cpu.max"] = quota + " " + strconv.FormatInt(period, 10)
	}
	if s.MemoryLimit != nil {
		files["memory.max"] = "max"
		if *s.MemoryLimit > 0 {
			files["memory.max"] = strconv.FormatInt(*s.MemoryLimit, 10)
		}
	}
	setStr(files, "cpuset.cpus", s.CpusetCpus)
	setStr(files, "cpuset.mems", s.CpusetMems)
	for k, v := range s.Files {
		files[k] = v
	}
	dir := filepath.Join(w.root, Path(parent))
	return writeAll(files, func(name string) string { return filepath.Join(dir, name) })
}

// SharesToWeight converts cgroup v1 cpu.shares [2, 262144] to cgroup v2 cpu.weight [1, 10000] with
// the mapping runc (1.3.2 on) applies to containers: 1024 shares, one CPU, is weight 100, as heavy as
// a systemd service. It is used whatever runtime the node runs, even one that still maps linearly
// (1024 → 39): the weight competes only with the cgroup's siblings, and the pod cgroups Tandem writes
// (BE pods with batch resources) sit beside other such pods and beside plain BestEffort pods, whose
// minimum shares (2) are weight 1 either way; the runtime's container cgroups are inside the pod and
// never weigh against it. Shares outside the kernel's range are clamped first.
//
// The mapping is opencontainers/cgroups' ConvertCPUSharesToCgroupV2Value (a test checks every share
// value against it), written here because that function's package links a D-Bus client, go-systemd
// and logrus into tandem-proxy: 0.7 MB of its 41 MB executable, pages it maps at start and holds as RSS.
func SharesToWeight(shares int64) int64 {
	shares = min(max(shares, MinShares), MaxShares)
	if shares == MinShares {
		return MinWeight
	}
	if shares == MaxShares {
		return MaxWeight
	}
	// A quadratic in log2(shares) through (2, 1), (1024, 100) and (262144, 10000), rounded up.
	l := math.Log2(float64(shares))
	return int64(math.Ceil(math.Pow(10, (l*l+125*l)/612-7.0/34)))
}

func setInt(m map[string]string, k string, v *int64) {
	if v != nil {
		m[k] = strconv.FormatInt(*v, 10)
	}
}

func setStr(m map[string]string, k string, v *string) {
	if v != nil {
		m[k] = *v
	}
}

// writeOrder is the order files are written in: by name, except cpu.idle, which goes last. Once a group
// is idle the kernel refuses (EINVAL) any cpu.shares or cpu.weight write and reports the idle weight.
func writeOrder(files map[string]string) []string {
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == "cpu.idle") != (names[j] == "cpu.idle") {
			return names[j] == "cpu.idle"
		}
		return names[i] < names[j]
	})
	return names
}

// writeAll writes every file, in a stable order, and reports every failure. A cgroup that does not exist
// is ErrNotFound: the settings cannot be applied, and creating it here would leave a cgroup behind that
// nothing removes.
func writeAll(files map[string]string, path func(string) string) error {
	var errs []error
	for _, name := range writeOrder(files) {
		p := path(name)
		if _, err := os.Stat(filepath.Dir(p)); errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup %s does not exist: %w", filepath.Dir(p), errdefs.ErrNotFound))
			continue
		}
		// O_WRONLY without O_CREATE: a file the kernel does not offer is an error, not a new file.
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", p, err))
			continue
		}
		_, err = f.WriteString(files[name])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("write %q to %s: %w", files[name], p, err))
		}
	}
	return errors.Join(errs...)
}
