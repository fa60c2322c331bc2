package collector

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
)

// containerd/cgroups/v3 is the reference for what the cgroup files mean: the readers in
// cgroupfile.go must agree with it field by field. The collector does not read through it on its
// hot path; see cgroupfile.go for the measured cost.

// libV1 reads a v1 cgroup through containerd/cgroups' cgroup1 package, with the hierarchy rooted
// at root rather than found in /proc/self/mountinfo.
type libV1 struct{ root string }

func (l libV1) stat(rel string) (cgroupStat, error) {
	hierarchy := func() ([]cgroup1.Subsystem, error) {
		return []cgroup1.Subsystem{cgroup1.NewCpuacct(l.root), cgroup1.NewCpu(l.root),
			cgroup1.NewMemory(l.root, cgroup1.IgnoreModules("memsw", "kmem", "kmem.tcp"))}, nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(rel), cgroup1.WithHierarchy(hierarchy))
	if err != nil {
		return cgroupStat{}, err
	}
	m, err := cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return cgroupStat{}, err
	}
	return cgroupStat{
		cpuNanos:         m.GetCPU().GetUsage().GetTotal(),
		throttledPeriods: m.GetCPU().GetThrottling().GetThrottledPeriods(),
		periods:          m.GetCPU().GetThrottling().GetPeriods(),
		workingSet:       workingSet(m.GetMemory().GetUsage().GetUsage(), m.GetMemory().GetTotalInactiveFile()),
	}, nil
}

// libV2 reads a v2 cgroup through containerd/cgroups' cgroup2 package.
type libV2 struct{ root string }

func (l libV2) stat(rel string) (cgroupStat, error) {
	m, err := cgroup2.Load(filepath.Join("/", rel), cgroup2.WithMountpoint(l.root))
	if err != nil {
		return cgroupStat{}, err
	}
	st, err := m.StatFiltered(cgroup2.StatCPU | cgroup2.StatMemory)
	if err != nil {
		return cgroupStat{}, err
	}
	return cgroupStat{
		cpuNanos:         st.GetCPU().GetUsageUsec() * 1000,
		throttledPeriods: st.GetCPU().GetNrThrottled(),
		periods:          st.GetCPU().GetNrPeriods(),
		workingSet:       workingSet(st.GetMemory().GetUsage(), st.GetMemory().GetInactiveFile()),
	}, nil
}

func TestReadersAgreeWithContainerdCgroups(t *testing.T) {
	t.Parallel()
	counters := []ctrCounters{
		{cpuNanos: 123456789000, usage: 300 << 20, inactive: 100 << 20, throttled: 3, total: 30},
		{cpuNanos: 0, usage: 1 << 20, inactive: 2 << 20},
		{cpuNanos: 1000, usage: 0},
	}
	for _, v2 := range []bool{false, true} {
		for i, c := range counters {
			t.Run(fmt.Sprintf("v2=%v/%d", v2, i), func(t *testing.T) {
				t.Parallel()
				root := t.TempDir()
				rel := "kubepods/pod1/ctr"
				var ours cgroupReader
				var ref interface {
					stat(string) (cgroupStat, error)
				}
				if v2 {
					fakeV2Root(t, root)
					fakeV2Cgroup(t, root, rel, c)
					ours, ref = &v2Reader{root: root}, libV2{root: root}
				} else {
					fakeV1Root(t, root)
					fakeV1Container(t, root, rel, c)
					ours, ref = &v1Reader{root: root}, libV1{root: root}
				}
				got, err := ours.stat(ours.files(rel))
				if err != nil {
					t.Fatal(err)
				}
				want, err := ref.stat(rel)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("direct read %+v, containerd/cgroups %+v", got, want)
				}
			})
		}
	}
}

func TestReaderMissingCgroup(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, r := range []cgroupReader{&v1Reader{root: root}, &v2Reader{root: root}} {
		if _, err := r.stat(r.files("gone")); err == nil {
			t.Errorf("v%d: a missing cgroup read without error", r.version())
		}
	}
}
