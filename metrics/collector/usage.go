package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// cgroupStat is what the usage source needs from one container cgroup.
type cgroupStat struct {
	cpuNanos                  uint64 // cumulative CPU time
	workingSet                int64
	throttledPeriods, periods uint64
}

// cgroupReader reads container cgroups on one hierarchy kind.
type cgroupReader interface {
	// dir is the directory whose existence says the cgroup is there.
	dir(rel string) string
	// files are the files of the cgroup at rel that stat reads, in its order.
	files(rel string) []string
	stat(files []string) (cgroupStat, error)
	// release forgets files: the container is gone, its kept descriptors are closed.
	release(files []string)
	// closeAll closes every kept descriptor: the source stops.
	closeAll()
	version() int
}

// workingSet is usage minus inactive file cache, as the kubelet computes it: the memory the kernel
// cannot take back without hurting the container.
func workingSet(usage, inactiveFile uint64) int64 {
	if inactiveFile >= usage {
		return 0
	}
	return int64(usage - inactiveFile)
}

// onCgroupFS tells whether dir is on a cgroup filesystem, whose files fail to read (ENODEV) once
// their cgroup is removed: only there may the reader keep files open between samples. A removed
// file of any other filesystem (the fake trees of tests) would go on reading as it was.
func onCgroupFS(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}

// detectReader picks the hierarchy under root: v2 when root is a cgroup2 mount with controllers,
// v1 when root holds a cpuacct hierarchy. Hybrid hosts (v1 controllers plus an empty cgroup2 at
// root/unified) are v1, because that is where the runtime accounts containers.
func detectReader(root string) (cgroupReader, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return &v2Reader{root: root, r: fileReader{keep: onCgroupFS(root)}}, nil
	}
	if fi, err := os.Stat(filepath.Join(root, "cpuacct")); err == nil && fi.IsDir() {
		return &v1Reader{root: root, r: fileReader{keep: onCgroupFS(filepath.Join(root, "cpuacct"))}}, nil
	}
	return nil, fmt.Errorf("no cgroup hierarchy under %s (neither cgroup.controllers nor cpuacct/)", root)
}

// resolveCgroup returns the first candidate that exists, or "" when the cgroup is not there (yet).
func resolveCgroup(dir func(string) string, t Target) string {
	if t.ContainerID == "" {
		return ""
	}
	if t.Cgroup != "" {
		if fi, err := os.Stat(dir(t.Cgroup)); err == nil && fi.IsDir() {
			return t.Cgroup
		}
		return ""
	}
	for _, rel := range cgroup.ContainerPaths(t.CgroupParent, t.ContainerID) {
		if fi, err := os.Stat(dir(rel)); err == nil && fi.IsDir() {
			return rel
		}
	}
	return ""
}

type containerState struct {
	rel      string
	files    []string // reader.files(rel), joined once
	cpuNanos uint64
	at       time.Time
	seen     bool // cpuNanos/at hold a sample
	failing  bool // the last read failed; logged once until it recovers
}

// usageSource samples node and container usage.
type usageSource struct {
	proc, cgroupRoot string

	mu         sync.Mutex // sample runs in one goroutine; the mutex guards against a racing test
	reader     cgroupReader
	prevCPU    procStat
	havePrev   bool
	containers map[string]*containerState
	now        func() time.Time
}

func newUsageSource(proc, cgroupRoot string) *usageSource {
	return &usageSource{proc: proc, cgroupRoot: cgroupRoot, containers: map[string]*containerState{}, now: time.Now}
}

// detect checks /proc and takes the first CPU reading, so the first snapshot after one interval
// already has a delta. A missing cgroup hierarchy only turns off the per-container half.
func (u *usageSource) detect(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, err := u.readMem(); err != nil {
		return err
	}
	t, err := u.readCPU()
	if err != nil {
		return err
	}
	u.prevCPU, u.havePrev = t, true
	r, err := detectReader(u.cgroupRoot)
	if err != nil {
		klog.FromContext(ctx).Info("Container usage off: node usage only", "reason", err.Error())
		return nil
	}
	u.reader = r
	klog.FromContext(ctx).V(2).Info("Container cgroups detected", "cgroupVersion", r.version(), "root", u.cgroupRoot)
	return nil
}

// close closes the cgroup files the source keeps open.
func (u *usageSource) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.reader != nil {
		u.reader.closeAll()
	}
	clear(u.containers)
}

func (u *usageSource) readCPU() (procStat, error) {
	b, err := os.ReadFile(filepath.Join(u.proc, "stat"))
	if err != nil {
		return procStat{}, fmt.Errorf("read node CPU times: %w", err)
	}
	return parseProcStat(b)
}

func (u *usageSource) readMem() (memInfo, error) {
	b, err := os.ReadFile(filepath.Join(u.proc, "meminfo"))
	if err != nil {
		return memInfo{}, fmt.Errorf("read node memory: %w", err)
	}
	return parseMeminfo(b)
}

// sample reads the node and every target once. It returns nil when the node itself cannot be read,
// so consumers keep the last good snapshot and their staleness checks take over.
func (u *usageSource) sample(ctx context.Context, targets []Target) *Snapshot {
	u.mu.Lock()
	defer u.mu.Unlock()
	logger := klog.FromContext(ctx)
	now := u.now()
	cpu, err := u.readCPU()
	if err != nil {
		logger.Error(err, "Skipping usage sample")
		return nil
	}
	mem, err := u.readMem()
	if err != nil {
		logger.Error(err, "Skipping usage sample")
		return nil
	}
	snap := &Snapshot{
		Time:     now,
		Capacity: Usage{CPUMilli: int64(cpu.all.cpus) * 1000, MemoryBytes: mem.total},
		Node:     Usage{MemoryBytes: mem.used()},
	}
	if u.havePrev {
		snap.Node.CPUMilli = busyMilli(u.prevCPU.all, cpu.all)
		snap.Steal = Steal{CPUMilli: stealMilli(u.prevCPU.all, cpu.all), PerCPU: perCPUSteal(u.prevCPU, cpu)}
	}
	u.prevCPU, u.havePrev = cpu, true

	live := make(map[string]bool, len(targets))
	if u.reader != nil {
		snap.Containers = make([]ContainerUsage, 0, len(targets))
		for _, t := range targets {
			if t.ContainerID == "" || live[t.ContainerID] {
				continue
			}
			live[t.ContainerID] = true
			if cu, ok := u.sampleContainer(logger, t, now); ok {
				snap.Containers = append(snap.Containers, cu)
			}
		}
	}
	for id, st := range u.containers {
		if !live[id] {
			u.reader.release(st.files)
			delete(u.containers, id)
		}
	}
	slices.SortFunc(snap.Containers, func(a, b ContainerUsage) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container), cmp.Compare(a.ContainerID, b.ContainerID))
	})
	snap.System = snap.Node
	for _, c := range snap.Containers {
		snap.System.CPUMilli -= c.CPUMilli
		snap.System.MemoryBytes -= c.MemoryBytes
	}
	snap.System.CPUMilli = max(snap.System.CPUMilli, 0)
	snap.System.MemoryBytes = max(snap.System.MemoryBytes, 0)
	return snap
}

// sampleContainer reads one container. A container whose cgroup is not there yet (created but not
// started) or has gone (removed between Targets and the read) is left out without a log line.
func (u *usageSource) sampleContainer(logger klog.Logger, t Target, now time.Time) (ContainerUsage, bool) {
	st := u.containers[t.ContainerID]
	if st == nil || st.rel == "" {
		rel := resolveCgroup(u.reader.dir, t)
		if rel == "" {
			return ContainerUsage{}, false
		}
		st = &containerState{rel: rel, files: u.reader.files(rel)}
		u.containers[t.ContainerID] = st
	}
	s, err := u.reader.stat(st.files)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || !dirExists(u.reader.dir(st.rel)) {
			u.reader.release(st.files)
			delete(u.containers, t.ContainerID)
			return ContainerUsage{}, false
		}
		if !st.failing {
			logger.Error(err, "Cannot read container cgroup; leaving it out until it recovers", "container", t.Container, "pod", klog.KRef(t.Namespace, t.Pod))
			st.failing = true
		}
		return ContainerUsage{}, false
	}
	st.failing = false
	cu := ContainerUsage{
		Target:           t,
		Usage:            Usage{MemoryBytes: s.workingSet},
		ThrottledPeriods: int64(s.throttledPeriods),
		Periods:          int64(s.periods),
	}
	if st.seen {
		cu.CPUMilli = cpuMilli(st.cpuNanos, s.cpuNanos, now.Sub(st.at))
	}
	st.cpuNanos, st.at, st.seen = s.cpuNanos, now, true
	return cu, true
}

// cpuMilli is the average CPU use between two cumulative readings taken elapsed apart. A counter that
// went backwards (a cgroup recreated under the same name) reads as 0 for one interval.
func cpuMilli(prevNanos, curNanos uint64, elapsed time.Duration) int64 {
	if elapsed <= 0 || curNanos < prevNanos {
		return 0
	}
	return int64(float64(curNanos-prevNanos) / float64(elapsed.Nanoseconds()) * 1000)
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
