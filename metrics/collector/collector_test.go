package collector

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/resource/qos"
)

// TestCollectorRunExports runs the whole collector on a fake cgroup v2 node and scrapes it as
// Prometheus would. The counters in the fake tree do not move, so every rate is 0 and the scrape
// is exact whatever the machine's load.
func TestCollectorRunExports(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir := t.TempDir()
	proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	fakeProc(t, proc, 1000, 1000, 4_000_000, 3_000_000)
	fakeV2Root(t, cg)
	podRel := "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_web.slice"
	fakeV2Cgroup(t, cg, podRel, ctrCounters{})
	fakeV2Cgroup(t, cg, podRel+"/cri-containerd-aaa.scope", ctrCounters{cpuNanos: 1e9, usage: 300 << 20, inactive: 100 << 20, throttled: 4, total: 40})
	fakeV2Cgroup(t, cg, podRel+"/cri-containerd-sidecar.scope", ctrCounters{usage: 1 << 20})
	targets := []Target{
		{Namespace: "shop", Pod: "web", PodUID: "uid-web", Container: "app", ContainerID: "aaa", QoS: qos.LS, CgroupParent: "kubepods-burstable-poduid_web.slice"},
		{Namespace: "shop", Pod: "web", PodUID: "uid-web", Container: "log", ContainerID: "sidecar", QoS: qos.LS, CgroupParent: "kubepods-burstable-poduid_web.slice"},
		// Restarted: the old attempt is still in the store and its cgroup is still there; the
		// registry must not see the same series twice.
		{Namespace: "shop", Pod: "web", PodUID: "uid-web", Container: "log", ContainerID: "sidecar-old", QoS: qos.LS, CgroupParent: "kubepods-burstable-poduid_web.slice"},
	}
	fakeV2Cgroup(t, cg, podRel+"/cri-containerd-sidecar-old.scope", ctrCounters{usage: 5 << 20})
	// A host application, added apart from the store's containers: its own series, no pod's.
	fakeV2Cgroup(t, cg, "host-latency-sensitive/nginx", ctrCounters{usage: 7 << 20})
	hostApp := Target{Container: "nginx", ContainerID: "host-application/nginx", QoS: qos.LS, Cgroup: "/host-latency-sensitive/nginx"}

	cfg := DefaultConfig()
	cfg.NodeName = "n1"
	cfg.Usage.Interval = 100 * time.Millisecond
	cfg.PSI.Interval = 100 * time.Millisecond
	cfg.CPI.Enabled = false
	cfg.RunQueue.Enabled = false
	reg := prometheus.NewRegistry()
	c, err := New(cfg, Deps{ProcRoot: proc, CgroupRoot: cg, Targets: func() []Target { return targets }, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if c.Latest() != nil {
		t.Fatal("a snapshot exists before Run")
	}
	c.AddTargets(func() []Target { return []Target{hostApp} })
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	select {
	case <-c.Updates():
	case <-time.After(30 * time.Second):
		t.Fatal("no snapshot within 30s")
	}
	// PSI runs on its own ticker; wait until it has sampled too.
	polltest.Within(t, 30*time.Second, "a PSI sample", func() bool { return c.psi.latest.Load() != nil })
	s := c.Latest()
	if len(s.Containers) != 4 || s.Capacity.MemoryBytes != 4_000_000*1024 || s.Node.MemoryBytes != 1_000_000*1024 {
		t.Fatalf("snapshot = %+v", s)
	}

	want := `
# HELP tandem_container_cpu_cfs_throttled_periods_total CFS periods in which the container was throttled.
# TYPE tandem_container_cpu_cfs_throttled_periods_total counter
tandem_container_cpu_cfs_throttled_periods_total{container="app",namespace="shop",node="n1",pod="web",qos="LS"} 4
tandem_container_cpu_cfs_throttled_periods_total{container="log",namespace="shop",node="n1",pod="web",qos="LS"} 0
# HELP tandem_container_memory_working_set_bytes Container memory usage minus inactive file cache.
# TYPE tandem_container_memory_working_set_bytes gauge
tandem_container_memory_working_set_bytes{container="app",namespace="shop",node="n1",pod="web",qos="LS"} 2.097152e+08
tandem_container_memory_working_set_bytes{container="log",namespace="shop",node="n1",pod="web",qos="LS"} 1.048576e+06
# HELP tandem_node_memory_usage_bytes Memory the node uses: MemTotal − MemAvailable.
# TYPE tandem_node_memory_usage_bytes gauge
tandem_node_memory_usage_bytes{node="n1"} 1.024e+09
# HELP tandem_node_cpu_capacity_cores CPUs online on the node.
# TYPE tandem_node_cpu_capacity_cores gauge
tandem_node_cpu_capacity_cores{node="n1"} 2
# HELP tandem_node_pressure_some_seconds_total Time at least one task on the node stalled on the resource (PSI some).
# TYPE tandem_node_pressure_some_seconds_total counter
tandem_node_pressure_some_seconds_total{node="n1",resource="cpu"} 2.5
tandem_node_pressure_some_seconds_total{node="n1",resource="io"} 3
tandem_node_pressure_some_seconds_total{node="n1",resource="memory"} 1
# HELP tandem_pod_pressure_some_seconds_total Time at least one task of the pod stalled on the resource (PSI some, cgroup v2 only).
# TYPE tandem_pod_pressure_some_seconds_total counter
tandem_pod_pressure_some_seconds_total{namespace="shop",node="n1",pod="web",qos="LS",resource="cpu"} 4
tandem_pod_pressure_some_seconds_total{namespace="shop",node="n1",pod="web",qos="LS",resource="io"} 0
tandem_pod_pressure_some_seconds_total{namespace="shop",node="n1",pod="web",qos="LS",resource="memory"} 0
# HELP tandem_pod_memory_working_set_bytes Sum of the pod's containers' working sets.
# TYPE tandem_pod_memory_working_set_bytes gauge
tandem_pod_memory_working_set_bytes{namespace="shop",node="n1",pod="web",qos="LS"} 2.16006656e+08
# HELP tandem_host_application_memory_working_set_bytes A host application's memory usage minus inactive file cache.
# TYPE tandem_host_application_memory_working_set_bytes gauge
tandem_host_application_memory_working_set_bytes{application="nginx",node="n1",qos="LS"} 7.340032e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"tandem_container_cpu_cfs_throttled_periods_total", "tandem_container_memory_working_set_bytes",
		"tandem_node_memory_usage_bytes", "tandem_node_cpu_capacity_cores",
		"tandem_node_pressure_some_seconds_total", "tandem_pod_pressure_some_seconds_total",
		"tandem_pod_memory_working_set_bytes", "tandem_host_application_memory_working_set_bytes"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "tandem_container_cpu_cycles_total", "tandem_container_runqueue_latency_seconds"); err != nil || n != 0 {
		t.Errorf("disabled sources exported %d series (err %v)", n, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if err := c.Run(context.Background()); err == nil {
		t.Error("a second Run was accepted")
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	bad := DefaultConfig()
	bad.Usage.Interval = 0
	tests := []struct {
		name string
		cfg  Config
		deps Deps
	}{
		{"bad config", bad, Deps{ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup"}},
		{"no roots", DefaultConfig(), Deps{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tt.cfg, tt.deps); err == nil {
				t.Error("New accepted it")
			}
		})
	}
	reg := prometheus.NewRegistry()
	deps := Deps{ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Registerer: reg}
	if _, err := New(DefaultConfig(), deps); err != nil {
		t.Fatal(err)
	}
	if _, err := New(DefaultConfig(), deps); err == nil {
		t.Error("a second collector on the same registry was accepted")
	}
}

// TestSetUsageInterval: suppression switched on at run time must get its fast samples at once, not after
// the slow interval in force has run out.
func TestSetUsageInterval(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dir := t.TempDir()
	proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
	fakeProc(t, proc, 1000, 1000, 4_000_000, 3_000_000)
	fakeV2Root(t, cg)
	cfg := DefaultConfig()
	cfg.Usage.Interval = time.Hour
	cfg.PSI.Enabled, cfg.CPI.Enabled, cfg.RunQueue.Enabled = false, false, false
	c, err := New(cfg, Deps{ProcRoot: proc, CgroupRoot: cg})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetUsageInterval(time.Millisecond); err == nil {
		t.Error("SetUsageInterval(1ms) accepted an interval below the minimum")
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	if err := c.SetUsageInterval(100 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		select {
		case <-c.Updates():
		case <-time.After(30 * time.Second):
			t.Fatalf("snapshot %d not taken within 30s of SetUsageInterval(100ms); the hourly interval still ruled", i+1)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
