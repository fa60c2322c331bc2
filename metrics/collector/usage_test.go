package collector

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/resource/qos"
)

func TestUsageSample(t *testing.T) {
	t.Parallel()
	ls := Target{Namespace: "shop", Pod: "web", PodUID: "uid-web", Container: "app", ContainerID: "aaa", QoS: qos.LS}
	be := Target{Namespace: "batch", Pod: "job", PodUID: "uid-job", Container: "work", ContainerID: "bbb", QoS: qos.BE}
	tests := []struct {
		name   string
		v2     bool
		lsPar  string // CgroupParent of ls, be
		bePar  string
		lsRel  string // where the runtime put them
		beRel  string
		noBeCg bool // be's cgroup is not there yet
	}{
		{
			name: "v1 cgroupfs", lsPar: "/kubepods/burstable/poduid-web", bePar: "/kubepods/besteffort/poduid-job",
			lsRel: "kubepods/burstable/poduid-web/aaa", beRel: "kubepods/besteffort/poduid-job/bbb",
		},
		{
			name: "v1 pod without parent lands in k8s.io", lsPar: "/kubepods/burstable/poduid-web", bePar: "",
			lsRel: "kubepods/burstable/poduid-web/aaa", beRel: "k8s.io/bbb",
		},
		{
			name: "v2 systemd slices and scopes", v2: true,
			lsPar: "kubepods-burstable-poduid_web.slice", bePar: "kubepods-besteffort-poduid_job.slice",
			lsRel: "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_web.slice/cri-containerd-aaa.scope",
			beRel: "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poduid_job.slice/cri-containerd-bbb.scope",
		},
		{
			name: "v2 cgroupfs", v2: true, lsPar: "/kubepods/burstable/poduid-web", bePar: "/kubepods/besteffort/poduid-job",
			lsRel: "kubepods/burstable/poduid-web/aaa", beRel: "kubepods/besteffort/poduid-job/bbb",
		},
		{
			name: "container created but not started is left out", lsPar: "/kubepods/burstable/poduid-web", bePar: "/kubepods/besteffort/poduid-job",
			lsRel: "kubepods/burstable/poduid-web/aaa", noBeCg: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
			write := fakeV1Container
			if tt.v2 {
				fakeV2Root(t, cg)
				write = fakeV2Cgroup
			} else {
				fakeV1Root(t, cg)
			}
			fakeProc(t, proc, 1000, 1000, 8_000_000, 6_000_000)
			write(t, cg, tt.lsRel, ctrCounters{cpuNanos: 1e9, usage: 300 << 20, inactive: 100 << 20, throttled: 1, total: 10})
			if !tt.noBeCg {
				write(t, cg, tt.beRel, ctrCounters{cpuNanos: 5e9, usage: 50 << 20, inactive: 80 << 20, throttled: 7, total: 20})
			}
			lsT, beT := ls, be
			lsT.CgroupParent, beT.CgroupParent = tt.lsPar, tt.bePar

			u := newUsageSource(proc, cg)
			now := time.Unix(1000, 0)
			u.now = func() time.Time { return now }
			if err := u.detect(ctx); err != nil {
				t.Fatalf("detect: %v", err)
			}
			first := u.sample(ctx, []Target{lsT, beT})
			if first == nil {
				t.Fatal("no first snapshot")
			}
			for _, c := range first.Containers {
				if c.CPUMilli != 0 {
					t.Errorf("first sample of %s has CPU %d; it has no interval yet", c.Container, c.CPUMilli)
				}
			}

			// Two seconds later: the node was busy for 1 of 2 CPUs, LS used 1.5 s of CPU (0.75
			// cores), BE 0.5 s (0.25 cores); LS was throttled twice more.
			now = now.Add(2 * time.Second)
			fakeProc(t, proc, 1000+200, 1000+200, 8_000_000, 5_000_000)
			write(t, cg, tt.lsRel, ctrCounters{cpuNanos: 2.5e9, usage: 400 << 20, inactive: 100 << 20, throttled: 3, total: 30})
			if !tt.noBeCg {
				write(t, cg, tt.beRel, ctrCounters{cpuNanos: 5.5e9, usage: 50 << 20, inactive: 80 << 20, throttled: 7, total: 25})
			}
			s := u.sample(ctx, []Target{lsT, beT})
			if s == nil {
				t.Fatal("no second snapshot")
			}
			if s.Capacity != (Usage{CPUMilli: 2000, MemoryBytes: 8_000_000 * 1024}) {
				t.Errorf("capacity = %+v", s.Capacity)
			}
			if s.Node != (Usage{CPUMilli: 1000, MemoryBytes: 3_000_000 * 1024}) {
				t.Errorf("node = %+v, want one core and 3e6 kB", s.Node)
			}
			want := []ContainerUsage{
				// Sorted by namespace: batch before shop. BE's inactive file exceeds its usage:
				// working set 0, not negative.
				{Target: beT, Usage: Usage{CPUMilli: 250, MemoryBytes: 0}, ThrottledPeriods: 7, Periods: 25},
				{Target: lsT, Usage: Usage{CPUMilli: 750, MemoryBytes: 300 << 20}, ThrottledPeriods: 3, Periods: 30},
			}
			if tt.noBeCg {
				want = want[1:]
			}
			if len(s.Containers) != len(want) {
				t.Fatalf("containers = %+v, want %+v", s.Containers, want)
			}
			var sum Usage
			for i := range want {
				if s.Containers[i] != want[i] {
					t.Errorf("container %d = %+v, want %+v", i, s.Containers[i], want[i])
				}
				sum.CPUMilli += want[i].CPUMilli
				sum.MemoryBytes += want[i].MemoryBytes
			}
			wantSys := Usage{CPUMilli: 1000 - sum.CPUMilli, MemoryBytes: 3_000_000*1024 - sum.MemoryBytes}
			if s.System != wantSys {
				t.Errorf("system = %+v, want %+v", s.System, wantSys)
			}
		})
	}
}

func TestUsageContainerRemoved(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	fakeV1Root(t, cg)
	fakeProc(t, proc, 100, 100, 1000, 500)
	rel := "kubepods/podx/ccc"
	fakeV1Container(t, cg, rel, ctrCounters{cpuNanos: 1, usage: 10})
	tg := Target{Namespace: "ns", Pod: "p", Container: "c", ContainerID: "ccc", CgroupParent: "/kubepods/podx"}
	u := newUsageSource(proc, cg)
	if err := u.detect(ctx); err != nil {
		t.Fatal(err)
	}
	if s := u.sample(ctx, []Target{tg}); len(s.Containers) != 1 {
		t.Fatalf("containers = %+v, want the one container", s.Containers)
	}
	for _, c := range []string{"cpu", "cpuacct", "memory"} {
		if err := os.RemoveAll(filepath.Join(cg, c, rel)); err != nil {
			t.Fatal(err)
		}
	}
	// Still listed by the store (removal races the sample), but its cgroup is gone.
	if s := u.sample(ctx, []Target{tg}); len(s.Containers) != 0 {
		t.Errorf("containers = %+v, want none once the cgroup is gone", s.Containers)
	}
	if s := u.sample(ctx, nil); len(s.Containers) != 0 || len(u.containers) != 0 {
		t.Errorf("state kept for %d containers after the store dropped them", len(u.containers))
	}
}

func TestUsageWithoutCgroups(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	proc := filepath.Join(dir, "proc")
	fakeProc(t, proc, 100, 100, 1000, 500)
	u := newUsageSource(proc, filepath.Join(dir, "nothing"))
	if err := u.detect(ctx); err != nil {
		t.Fatalf("detect: %v; a host without cgroups still has node usage", err)
	}
	s := u.sample(ctx, []Target{{ContainerID: "x"}})
	if s == nil || s.Node.MemoryBytes != 500*1024 || len(s.Containers) != 0 {
		t.Errorf("snapshot = %+v, want node memory only", s)
	}
}

func TestCPUMilli(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		prev, cur uint64
		elapsed   time.Duration
		want      int64
	}{
		{"one core", 0, 1e9, time.Second, 1000},
		{"quarter core over 4s", 1e9, 2e9, 4 * time.Second, 250},
		{"counter reset", 5e9, 1e9, time.Second, 0},
		{"no time", 0, 1e9, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := cpuMilli(tt.prev, tt.cur, tt.elapsed); got != tt.want {
				t.Errorf("cpuMilli = %d, want %d", got, tt.want)
			}
		})
	}
}

// A host application (actuate/hostapp) is sampled at its own cgroup, named by Target.Cgroup, and its
// usage leaves System like a pod's; a container ID alone would never find it.
func TestUsageHostApplication(t *testing.T) {
	t.Parallel()
	app := Target{Container: "nginx", ContainerID: "host-application/nginx", QoS: qos.LS, Cgroup: "/host-latency-sensitive/nginx"}
	tests := []struct {
		name    string
		v2      bool
		missing bool
	}{
		{name: "v1"},
		{name: "v2", v2: true},
		{name: "cgroup not there yet", missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
			write := fakeV1Container
			if tt.v2 {
				fakeV2Root(t, cg)
				write = fakeV2Cgroup
			} else {
				fakeV1Root(t, cg)
			}
			fakeProc(t, proc, 1000, 1000, 8_000_000, 6_000_000)
			if !tt.missing {
				write(t, cg, "host-latency-sensitive/nginx", ctrCounters{cpuNanos: 1e9, usage: 100 << 20})
			}
			u := newUsageSource(proc, cg)
			now := time.Unix(1000, 0)
			u.now = func() time.Time { return now }
			if err := u.detect(ctx); err != nil {
				t.Fatal(err)
			}
			u.sample(ctx, []Target{app})
			now = now.Add(2 * time.Second)
			fakeProc(t, proc, 1000+200, 1000+200, 8_000_000, 6_000_000)
			if !tt.missing {
				write(t, cg, "host-latency-sensitive/nginx", ctrCounters{cpuNanos: 2e9, usage: 100 << 20})
			}
			s := u.sample(ctx, []Target{app})
			if tt.missing {
				if len(s.Containers) != 0 || s.System.CPUMilli != 1000 {
					t.Errorf("containers = %+v, system = %+v; want none and all the node's use as system", s.Containers, s.System)
				}
				return
			}
			want := ContainerUsage{Target: app, Usage: Usage{CPUMilli: 500, MemoryBytes: 100 << 20}}
			if len(s.Containers) != 1 || s.Containers[0] != want {
				t.Fatalf("containers = %+v, want %+v", s.Containers, want)
			}
			if s.System.CPUMilli != 500 {
				t.Errorf("system CPU = %d, want 500: the application's use is not the system's", s.System.CPUMilli)
			}
		})
	}
}
