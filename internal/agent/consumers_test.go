package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/actuate/yield"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/metrics/collector"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/sched"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

// recordingEvictor stands in for the Eviction API, which does not run in unit tests (tier 2 has it).
type recordingEvictor struct {
	mu   sync.Mutex
	pods []evict.Pod
}

func (r *recordingEvictor) Evict(_ context.Context, pod evict.Pod, _ evict.Reason, _ string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods = append(r.pods, pod)
	return nil
}

func (r *recordingEvictor) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pods)
}

func resolve(t *testing.T, data map[string]string) slo.Resolved {
	t.Helper()
	cfg := slo.Parse(data)
	if refused := cfg.Refused(); len(refused) > 0 {
		t.Fatal(refused)
	}
	r, err := cfg.ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConsumersFollowSLO: enabling and disabling resource-threshold-config and colocation-config at run
// time reaches the suppress loop, the evict loop and the reporter's settings, with no restart.
func TestConsumersFollowSLO(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	topo, err := topology.Discover(filepath.Join("..", "..", "resource", "topology", "testdata", "16cpu-2socket-smt"))
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	// LS busy on 13 of 16 CPUs, memory at 95 %, one BE pod holding 20 GiB.
	const gib = int64(1) << 30
	snap := &collector.Snapshot{Time: time.Now(),
		Capacity: collector.Usage{CPUMilli: 16000, MemoryBytes: 100 * gib},
		Node:     collector.Usage{CPUMilli: 15000, MemoryBytes: 95 * gib},
		System:   collector.Usage{CPUMilli: 1000},
		Containers: []collector.ContainerUsage{
			{Target: collector.Target{Namespace: "default", Pod: "ls", PodUID: "u-ls", Container: "c", QoS: "LS"}, Usage: collector.Usage{CPUMilli: 13000, MemoryBytes: 50 * gib}},
			{Target: collector.Target{Namespace: "default", Pod: "be", PodUID: "u-be", Container: "c", QoS: "BE"}, Usage: collector.Usage{CPUMilli: 1000, MemoryBytes: 20 * gib}},
		},
	}
	defaults := resolve(t, nil)
	colocation := &atomic.Pointer[slo.Resolved]{}
	colocation.Store(&defaults)
	cons := &consumers{base: policy.DefaultConfig(), colocation: colocation, resolved: defaults}

	ev := &recordingEvictor{}
	col, err := collector.New(collector.DefaultConfig(), collector.Deps{ProcRoot: t.TempDir(), CgroupRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// The loops as the agent builds them, from the settings in force; they are stepped by hand below.
	n := &nodeParts{st: settings{colocation: colocation}, cpus: cpus, col: col, evictor: ev, fe: storeFrontEnd{store.New()},
		poolsChanged: func() {}}
	hr, err := n.headroom(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lw, err := n.lsWaitGuard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	comps := []component{n.collector(), hr, lw, n.suppress(ctx, cons)}
	evc, err := n.evict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(comps, evc) {
		cons.add(ctx, c)
	}
	sup, el := n.sup, n.el
	if sup == nil {
		t.Fatal("CPU suppression switched off on a node with a CPU topology")
	}
	if got := col.UsageInterval(); got != time.Second {
		t.Errorf("usage sampled every %v with resource-threshold-config off, want the default 1s", got)
	}

	// Off, as Koordinator's defaults have it: BE keeps the whole pool and nothing is evicted.
	if d, err := sup.Step(ctx, snap); err != nil || d.Changed {
		t.Fatalf("suppress with resource-threshold-config off: %+v, %v; want no change", d, err)
	}
	if el.Step(ctx, snap); ev.count() != 0 {
		t.Fatal("evicted with resource-threshold-config off")
	}
	beBefore := cpus.Pools().BE.Size()

	on := resolve(t, map[string]string{
		slo.ResourceThresholdConfigKey: `{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 65, "memoryEvictThresholdPercent": 70}}`,
		slo.ColocationConfigKey:        `{"enable": true}`,
	})
	cons.apply(ctx, source.Update{Resolved: on, Origin: "test"})
	if !colocation.Load().Colocation.Enable {
		t.Error("the reporter's colocation settings did not follow")
	}
	d, err := sup.Step(ctx, snap)
	if err != nil || !d.Changed {
		t.Fatalf("suppress after enabling: %+v, %v; want BE shrunk", d, err)
	}
	if got := cpus.Pools().BE.Size(); got >= beBefore {
		t.Fatalf("BE pool %d CPUs after enabling suppression, want fewer than %d", got, beBefore)
	}
	if got := col.UsageInterval(); got != suppressInterval {
		t.Errorf("usage sampled every %v with suppression on, want %v", got, suppressInterval)
	}
	if el.Step(ctx, snap); ev.count() != 1 {
		t.Fatalf("%d evictions after enabling memory eviction at 70 %% with the node at 95 %%, want 1", ev.count())
	}

	// Off again: the suppression is lifted at the next sample.
	cons.apply(ctx, source.Update{Resolved: defaults, Origin: "test"})
	if _, err := sup.Step(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if got := cpus.Pools().BE.Size(); got != beBefore {
		t.Fatalf("BE pool %d CPUs after disabling, want all %d back", got, beBefore)
	}
	if colocation.Load().Colocation.Enable {
		t.Error("colocation still enabled for the reporter")
	}
	if got := col.UsageInterval(); got != time.Second {
		t.Errorf("usage sampled every %v after suppression was switched off, want 1s again", got)
	}
}

// TestYieldFollowsSLO: beClass.cpuQOS.yieldThreads, off by default, switches BE threads between
// SCHED_OTHER and the BE scheduling (actuate/yield) at run time.
func TestYieldFollowsSLO(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	// A real thread, listed in a directory laid out as the BE pods' cgroups.
	be := exec.Command("sleep", "300")
	if err := be.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = be.Process.Kill(); _ = be.Wait() })
	root := t.TempDir()
	ctr := filepath.Join(root, "pod1", "c1")
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctr, "tasks"), []byte(strconv.Itoa(be.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	defaults := resolve(t, nil)
	colocation := &atomic.Pointer[slo.Resolved]{}
	colocation.Store(&defaults)
	cons := &consumers{base: policy.DefaultConfig(), colocation: colocation, resolved: defaults}
	base := yield.DefaultConfig()
	base.BECgroupDir = root
	c, err := newYield(base, defaults, yield.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	cons.add(ctx, c)
	loops, err := supervise.New(ctx, nil, supervise.Backoff())
	if err != nil {
		t.Fatal(err)
	}
	c.Start(ctx, loops)
	defer func() { cancel(); loops.Wait() }()

	waitFor := func(want sched.Policy) {
		t.Helper()
		var last sched.Policy
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			a, _ := sched.Of(be.Process.Pid)
			last = a.Policy
			return last == want, nil
		})
		if err != nil {
			t.Fatalf("BE thread runs under %s, want %s", last, want)
		}
	}
	waitFor(sched.Other)
	cons.apply(ctx, source.Update{Origin: "test", Resolved: resolve(t, map[string]string{
		slo.ResourceQOSConfigKey: `{"clusterStrategy": {"beClass": {"cpuQOS": {"yieldThreads": true}}}}`})})
	waitFor(base.Want.Policy)
	cons.apply(ctx, source.Update{Origin: "test", Resolved: defaults})
	waitFor(sched.Other)
}

// TestFirstAppliedAfterStore: whoever waits for the first configuration (the reporter) reads it, not the
// defaults, once released.
func TestFirstAppliedAfterStore(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	for i := range 200 {
		defaults := resolve(t, nil)
		colocation := &atomic.Pointer[slo.Resolved]{}
		colocation.Store(&defaults)
		cons := &consumers{base: policy.DefaultConfig(), colocation: colocation, resolved: defaults, firstApplied: make(chan struct{})}
		seen := make(chan bool)
		go func() {
			<-cons.firstApplied
			seen <- colocation.Load().Colocation.Enable
		}()
		cons.apply(ctx, source.Update{Resolved: resolve(t, map[string]string{slo.ColocationConfigKey: `{"enable": true}`}), Origin: "test"})
		if !<-seen {
			t.Fatalf("run %d: released before the configuration was stored: the reporter read colocation off", i)
		}
	}
}
