package nri

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

// The tests drive the plugin through containerd's own side of NRI (nri/pkg/adaptation, what containerd
// links), over a real socket: what the plugin answers is what containerd would apply.

// fakeRuntime is containerd's side: it reports pods and containers at synchronization and records the
// unsolicited updates the plugin sends.
type fakeRuntime struct {
	t *testing.T
	r *adaptation.Adaptation

	mu      sync.Mutex
	pods    []*api.PodSandbox
	ctrs    []*api.Container
	updates []*api.ContainerUpdate
}

func startRuntime(t *testing.T, sock string, pods []*api.PodSandbox, ctrs []*api.Container) *fakeRuntime {
	t.Helper()
	f := &fakeRuntime{t: t, pods: pods, ctrs: ctrs}
	dir := t.TempDir()
	r, err := adaptation.New("containerd", "v2.4.2", f.sync, f.update,
		adaptation.WithSocketPath(sock), adaptation.WithPluginPath(dir), adaptation.WithPluginConfigPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	f.r = r
	t.Cleanup(r.Stop)
	return f
}

func (f *fakeRuntime) sync(ctx context.Context, cb adaptation.SyncCB) error {
	f.mu.Lock()
	pods, ctrs := f.pods, f.ctrs
	f.mu.Unlock()
	_, err := cb(ctx, pods, ctrs)
	return err
}

func (f *fakeRuntime) update(_ context.Context, u []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, u...)
	return nil, nil
}

// recordedCgroups is a cgroup v1 hierarchy that records what is written to it.
type recordedCgroups struct {
	mu     sync.Mutex
	writes map[string]cgroup.Settings
}

func (c *recordedCgroups) Version() int         { return 1 }
func (c *recordedCgroups) Supports(string) bool { return true }
func (c *recordedCgroups) Write(parent string, s cgroup.Settings) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writes == nil {
		c.writes = map[string]cgroup.Settings{}
	}
	c.writes[parent] = s
	return nil
}

func (c *recordedCgroups) get(parent string) (cgroup.Settings, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.writes[parent]
	return s, ok
}

// node is the plugin with the built-in policies on a 16-CPU, 2-socket machine.
type node struct {
	plugin  *Plugin
	cpus    *alloc.Allocator
	cgroups *recordedCgroups
	reg     *prometheus.Registry
	stop    func()
}

func startNode(t *testing.T, ctx context.Context, sock string, extra ...hooks.Registration) *node {
	t.Helper()
	topo, err := topology.Discover(filepath.Join("..", "resource", "topology", "testdata", "16cpu-2socket-smt"))
	if err != nil {
		t.Fatal(err)
	}
	cpus, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cg := &recordedCgroups{}
	refresh := make(chan struct{}, 1)
	deps := policy.Deps{Cgroups: cg, CPUSet: cpus, PoolsChanged: func() {
		select {
		case refresh <- struct{}{}:
		default:
		}
	}}
	reg := prometheus.NewRegistry()
	d, err := hooks.NewDispatcher(ctx, append(policy.Builtin(policy.DefaultConfig(), deps), extra...), reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Socket, cfg.Reconnect = sock, 50*time.Millisecond
	p, err := New(cfg, frontend.Deps{Hooks: d, Cgroups: cg, Registerer: reg, Refresh: refresh,
		Synchronized: func(ctx context.Context, snap *store.Snapshot) { cpuset.Restore(ctx, cpus, recorded(snap)) }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	n := &node{plugin: p, cpus: cpus, cgroups: cg, reg: reg}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(n.stop)
	n.waitReady(t)
	return n
}

func (n *node) waitReady(t *testing.T) {
	t.Helper()
	polltest.Within(t, 10*time.Second, "the plugin to be ready", func() bool { return n.plugin.Ready(context.Background()) == nil })
}

// recorded is what tandem-nri's wiring restores: the exclusive cpusets of live containers.
func recorded(snap *store.Snapshot) []cpuset.Recorded {
	pods := map[string]*store.Pod{}
	for _, p := range snap.Pods {
		pods[p.ID] = p
	}
	var out []cpuset.Recorded
	for _, c := range snap.Containers {
		class := resqos.Class(c.Annotations[qos.AnnotationClass])
		if p, ok := pods[c.PodSandboxID]; ok && class.Exclusive() && c.Resources != nil && c.Resources.CpusetCpus != "" {
			out = append(out, cpuset.Recorded{PodUID: p.UID, Container: c.Name, ContainerID: c.ID, Class: class, CPUs: c.Resources.CpusetCpus})
		}
	}
	return out
}

func shortSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "nri.sock")
}

func sandbox(name, class string) *api.PodSandbox {
	return &api.PodSandbox{
		Id: "sb-" + name, Name: name, Namespace: "default", Uid: name + "-uid",
		Labels: map[string]string{"koordinator.sh/qosClass": class},
		Linux:  &api.LinuxPodSandbox{CgroupParent: "/kubepods/pod" + name + "-uid"},
	}
}

// container is a container of cpu milli-CPUs, request == limit, as kubelet creates it.
func container(pod *api.PodSandbox, name string, milli int64) *api.Container {
	return &api.Container{
		Id: pod.Id + "-" + name, PodSandboxId: pod.Id, Name: name, State: api.ContainerState_CONTAINER_CREATED,
		Linux: &api.LinuxContainer{Resources: &api.LinuxResources{
			Cpu:    &api.LinuxCPU{Shares: api.UInt64(uint64(milli * 1024 / 1000)), Quota: api.Int64(milli * 100), Period: api.UInt64(100000)},
			Memory: &api.LinuxMemory{Limit: api.Int64(64 << 20)},
		}},
	}
}

// create runs the sandbox and creates the container. The plugin is ready once it has answered
// Synchronize, a moment before containerd's side lists it among its plugins: until the plugin has seen
// the sandbox, running it again is what a retrying kubelet would do.
func create(t testing.TB, ctx context.Context, r *fakeRuntime, n *node, pod *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, error) {
	t.Helper()
	var runErr error
	polltest.Within(t, 5*time.Second, "the plugin to see sandbox "+pod.Id, func() bool {
		if runErr = r.r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}); runErr != nil {
			return true
		}
		_, ok := n.plugin.Store().Pod(pod.Id)
		return ok
	})
	if runErr != nil {
		return nil, runErr
	}
	resp, err := r.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: c})
	if err != nil {
		return nil, err
	}
	return resp.GetAdjust(), nil
}

// createRunning creates the container and tells the plugin it runs, as containerd does after its start.
func createRunning(t *testing.T, ctx context.Context, r *fakeRuntime, n *node, pod *api.PodSandbox, c *api.Container) {
	t.Helper()
	if _, err := create(t, ctx, r, n, pod, c); err != nil {
		t.Fatal(err)
	}
	c.State = api.ContainerState_CONTAINER_RUNNING
	if err := r.r.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: c}); err != nil {
		t.Fatal(err)
	}
}

// TestCreateContainer: each class gets its CPUs through NRI's adjustment, as the cpuset policy decides
// (LSE and LSR whole cores of their own, LS and BE the shared pool), and an LSE
// container with a fractional CPU is refused with nothing held.
func TestCreateContainer(t *testing.T) {
	tests := []struct {
		name, class string
		milli       int64
		wantCPUs    string // cpuset in the adjustment; "" with wantErr
		wantErr     string
		wantCode    codes.Code
	}{
		// The 16-CPU machine's first two hyperthreads of one core (full-pcpus).
		{name: "lse", class: "LSE", milli: 2000, wantCPUs: "0,8"},
		{name: "lsr", class: "LSR", milli: 2000, wantCPUs: "0,8"},
		{name: "ls", class: "LS", milli: 500, wantCPUs: "0-15"},
		{name: "be", class: "BE", milli: 500, wantCPUs: "0-15"},
		{name: "lse-fraction", class: "LSE", milli: 1500, wantErr: "whole CPUs", wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			sock := shortSocket(t)
			rt := startRuntime(t, sock, nil, nil)
			n := startNode(t, ctx, sock)
			pod := sandbox(tt.name, tt.class)
			adj, err := create(t, ctx, rt, n, pod, container(pod, "app", tt.milli))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CreateContainer error = %v, want one saying %q", err, tt.wantErr)
				}
				// containerd passes the code on to kubelet, as tandem-proxy does.
				if got := status.Code(err); got != tt.wantCode {
					t.Fatalf("CreateContainer error code = %v, want %v", got, tt.wantCode)
				}
				if a := n.cpus.Allocations(); len(a) != 0 {
					t.Fatalf("allocations after a refused container = %v, want none", a)
				}
				if err := n.plugin.Ready(ctx); err != nil {
					t.Fatalf("plugin dropped after refusing a container: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := adj.GetLinux().GetResources().GetCpu().GetCpus(); got != tt.wantCPUs {
				t.Errorf("adjusted cpuset = %q, want %q", got, tt.wantCPUs)
			}
			if got := adj.GetAnnotations()[qos.AnnotationClass]; got != tt.class {
				t.Errorf("annotation %s = %q, want %q", qos.AnnotationClass, got, tt.class)
			}
		})
	}
}

// TestPodLevelSettings: NRI cannot change a pod, so BE pods' pod-level cgroup settings (cpu.idle, from
// the cpuidle policy) are written by the plugin itself, and the class the qos policy gives the sandbox is
// kept in the store for the node loops.
func TestPodLevelSettings(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := shortSocket(t)
	rt := startRuntime(t, sock, nil, nil)
	n := startNode(t, ctx, sock)
	pod := sandbox("batch", "BE")
	if _, err := create(t, ctx, rt, n, pod, container(pod, "app", 500)); err != nil {
		t.Fatal(err)
	}
	s, ok := n.cgroups.get(pod.Linux.CgroupParent)
	if !ok || s.Files["cpu.idle"] != "1" {
		t.Fatalf("pod cgroup writes = %+v (written %v), want cpu.idle 1", s, ok)
	}
	stored, ok := n.plugin.Store().Pod(pod.Id)
	if !ok || stored.Annotations[qos.AnnotationClass] != "BE" {
		t.Fatalf("stored pod = %+v, want annotation %s=BE", stored, qos.AnnotationClass)
	}
}

// TestPoolMoves: an LSE container taking CPUs moves the running LS container off them with an
// unsolicited update, sent from the refresh loop, not from inside the event.
func TestPoolMoves(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := shortSocket(t)
	rt := startRuntime(t, sock, nil, nil)
	n := startNode(t, ctx, sock)
	ls := sandbox("web", "LS")
	lsCtr := container(ls, "app", 500)
	createRunning(t, ctx, rt, n, ls, lsCtr)
	lse := sandbox("db", "LSE")
	if _, err := create(t, ctx, rt, n, lse, container(lse, "app", 2000)); err != nil {
		t.Fatal(err)
	}
	polltest.Within(t, 5*time.Second, "the LS container's cpuset, sent and stored, to be 1-7,9-15 (off the LSE CPUs 0,8)", func() bool {
		got := rt.lastCPUs(lsCtr.Id, 0)
		stored, _ := n.plugin.Store().Container(lsCtr.Id)
		return got == "1-7,9-15" && stored.Resources.CpusetCpus == got
	})
}

// TestSynchronizeRestores: a restarted plugin (a new allocator, an empty store) rebuilds the exclusive
// allocations from what containerd reports, and releases those of containers that went away meanwhile.
func TestSynchronizeRestores(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := shortSocket(t)
	rt := startRuntime(t, sock, nil, nil)
	first := startNode(t, ctx, sock)
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for i, class := range []string{"LSE", "LSR", "LSE", "LS"} {
		pod := sandbox(fmt.Sprintf("p%d", i), class)
		c := container(pod, "app", 2000)
		adj, err := create(t, ctx, rt, first, pod, c)
		if err != nil {
			t.Fatal(err)
		}
		// What containerd reports afterwards: the container as adjusted.
		c.Linux.Resources.Cpu.Cpus = adj.GetLinux().GetResources().GetCpu().GetCpus()
		c.Annotations = adj.GetAnnotations()
		if err := rt.r.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: c}); err != nil {
			t.Fatal(err)
		}
		c.State = api.ContainerState_CONTAINER_RUNNING
		pods, ctrs = append(pods, pod), append(ctrs, c)
	}
	want := first.cpus.Allocations()
	if len(want) != 3 {
		t.Fatalf("allocations = %v, want 3", want)
	}
	first.stop()
	rt.r.Stop()

	rt = startRuntime(t, sock, pods, ctrs)
	second := startNode(t, ctx, sock)
	if got := second.cpus.Allocations(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("allocations after restart = %v, want %v", got, want)
	}
	// One LSE container went away while the plugin was down.
	second.stop()
	rt.r.Stop()
	startRuntime(t, sock, pods[1:], ctrs[1:])
	third := startNode(t, ctx, sock)
	if got := len(third.cpus.Allocations()); got != 2 {
		t.Fatalf("allocations = %v, want the 2 left", third.cpus.Allocations())
	}
}

// relay stands between the plugin and the runtime's socket, so a test can cut the connection as a
// containerd that exits does: the in-process runtime keeps external connections open when stopped.
type relay struct {
	lis    net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
}

func startRelay(t *testing.T, sock, target string) *relay {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{lis: lis, target: target}
	t.Cleanup(func() { _ = lis.Close(); r.cut("") })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			up, err := net.Dial("unix", r.target)
			if err != nil {
				r.mu.Unlock()
				_ = c.Close()
				continue
			}
			r.conns = append(r.conns, c, up)
			r.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	return r
}

// cut closes every relayed connection and sends later ones to target.
func (r *relay) cut(target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns, r.target = nil, target
}

// TestReconnect: containerd restarting ends the connection; the plugin connects again, is synchronized
// and handles events.
func TestReconnect(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := shortSocket(t)
	first := filepath.Join(filepath.Dir(sock), "a.sock")
	startRuntime(t, first, nil, nil)
	r := startRelay(t, sock, first)
	n := startNode(t, ctx, sock)
	second := filepath.Join(filepath.Dir(sock), "b.sock")
	rt := startRuntime(t, second, nil, nil)
	r.cut(second)
	polltest.Within(t, 5*time.Second, "the plugin to connect again after containerd went away", func() bool {
		return testutil.ToFloat64(n.plugin.metrics.connects) >= 2
	})
	n.waitReady(t)
	pod := sandbox("after", "LSE")
	if _, err := create(t, ctx, rt, n, pod, container(pod, "app", 1000)); err != nil {
		t.Fatalf("CreateContainer after the reconnection: %v", err)
	}
}

// slowHook answers after containerd would have given up.
type slowHook struct{}

func (slowHook) Name() string { return "slow" }
func (slowHook) PreCreateContainer(ctx context.Context, _ *hooks.PodInfo, _ *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(10 * time.Second):
		return &hooks.Adjustment{Annotations: map[string]string{"slow": "1"}}, nil
	}
}

// TestSlowHookKeepsPlugin: a hook slower than containerd's request timeout (failure policy Ignore) is
// cut off in time: the container is created with the other policies' adjustment and containerd keeps the
// plugin.
func TestSlowHookKeepsPlugin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := shortSocket(t)
	rt := startRuntime(t, sock, nil, nil)
	n := startNode(t, ctx, sock, hooks.Registration{Name: "slow", Order: 900, Timeout: 5 * time.Second,
		FailurePolicy: hooks.Ignore, New: func() (hooks.Hook, error) { return slowHook{}, nil }})
	pod := sandbox("web", "LS")
	start := time.Now()
	adj, err := create(t, ctx, rt, n, pod, container(pod, "app", 500))
	if err != nil {
		t.Fatalf("CreateContainer with a slow hook: %v", err)
	}
	if took := time.Since(start); took >= DefaultConfig().RequestTimeout {
		t.Fatalf("answered after %v, at or past containerd's %v", took, DefaultConfig().RequestTimeout)
	}
	if adj.GetLinux().GetResources().GetCpu().GetCpus() == "" {
		t.Fatal("the other policies' cpuset was lost with the slow hook")
	}
	pod2 := sandbox("web2", "LS")
	if _, err := create(t, ctx, rt, n, pod2, container(pod2, "app", 500)); err != nil {
		t.Fatalf("containerd dropped the plugin after the slow hook: %v", err)
	}
	if err := n.plugin.Ready(ctx); err != nil {
		t.Fatalf("plugin not connected after the slow hook: %v", err)
	}
}

// TestOOMScoreClamped: an LSE container's -998 is not put below what containerd allows. Here containerd's
// side is this test process (score read through the socket's peer), and the spec carries kubelet's -997 for
// a Guaranteed pod: the lower of the two bounds the hook's value.
func TestOOMScoreClamped(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Skip("no /proc/self/oom_score_adj")
	}
	self, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	sock := shortSocket(t)
	rt := startRuntime(t, sock, nil, nil)
	n := startNode(t, ctx, sock)
	pod := sandbox("db", "LSE")
	c := container(pod, "app", 1000)
	c.Linux.OomScoreAdj = &api.OptionalInt{Value: -997}
	adj, err := create(t, ctx, rt, n, pod, c)
	if err != nil {
		t.Fatal(err)
	}
	want := max(-998, min(self, -997))
	if got := adj.GetLinux().GetOomScoreAdj(); got == nil || got.GetValue() != want {
		t.Fatalf("adjusted oom_score_adj = %v, want %d (containerd's own %d, spec -997, hook -998)", got, want, self)
	}
}

func TestOOMScore(t *testing.T) {
	spec := func(v int64) *int64 { return &v }
	tests := []struct {
		name    string
		v, rt   int64
		spec    *int64
		want    int64
		wantSet bool
	}{
		{name: "containerd under systemd (-999), kubelet's -997", v: -998, rt: -999, spec: spec(-997), want: -998, wantSet: true},
		{name: "containerd at 0 with restrict on, kubelet's -997", v: -998, rt: 0, spec: spec(-997), want: -997, wantSet: true},
		{name: "raising is always allowed", v: 1000, rt: -999, spec: spec(-997), want: 1000, wantSet: true},
		{name: "containerd's score unknown: the spec's bounds it", v: -998, rt: unknownScore, spec: spec(-997), want: -997, wantSet: true},
		{name: "no spec value: containerd's bounds it", v: -998, rt: -500, want: -500, wantSet: true},
		{name: "nothing known: left alone", v: -998, rt: unknownScore, wantSet: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := oomScore(tt.v, tt.rt, tt.spec)
			if ok != tt.wantSet || (ok && got != tt.want) {
				t.Fatalf("oomScore(%d, %d, %v) = %d, %v; want %d, %v", tt.v, tt.rt, tt.spec, got, ok, tt.want, tt.wantSet)
			}
		})
	}
}

// TestMovedAfterStart: a container that is created but not yet running when an LSE pod takes its CPUs is
// moved once it runs. containerd writes an update to a container that is not running into its spec alone,
// and a starting container has already made its task from it, so only an update sent after
// PostStartContainer reaches the cgroup.
func TestMovedAfterStart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := shortSocket(t)
	rt := startRuntime(t, sock, nil, nil)
	n := startNode(t, ctx, sock)
	ls := sandbox("web", "LS")
	lsCtr := container(ls, "app", 500)
	if _, err := create(t, ctx, rt, n, ls, lsCtr); err != nil {
		t.Fatal(err)
	}
	lse := sandbox("db", "LSE")
	lseCtr := container(lse, "app", 2000)
	createRunning(t, ctx, rt, n, lse, lseCtr)
	// The refresh the LSE pod asked for reaches the LS container while it is only created: containerd
	// would write it into the spec alone.
	polltest.Within(t, 2*time.Second, "the created LS container's spec to be updated to cpuset 1-7,9-15", func() bool {
		return rt.lastCPUs(lsCtr.Id, 0) == "1-7,9-15"
	})
	if err := rt.r.StartContainer(ctx, &api.StartContainerRequest{Pod: ls, Container: lsCtr}); err != nil {
		t.Fatal(err)
	}
	rt.mu.Lock()
	before := len(rt.updates)
	rt.mu.Unlock()
	lsCtr.State = api.ContainerState_CONTAINER_RUNNING
	if err := rt.r.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: ls, Container: lsCtr}); err != nil {
		t.Fatal(err)
	}
	polltest.Within(t, 2*time.Second, "the LS container's cpuset sent after it started to be 1-7,9-15 (off the LSE CPUs 0,8)", func() bool {
		return rt.lastCPUs(lsCtr.Id, before) == "1-7,9-15"
	})
}

// lastCPUs is the cpuset of the last update the runtime received for a container, from its from-th on.
func (f *fakeRuntime) lastCPUs(id string, from int) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var got string
	for _, u := range f.updates[from:] {
		if u.GetContainerId() == id {
			got = u.GetLinux().GetResources().GetCpu().GetCpus()
		}
	}
	return got
}

// filesHook sets a cgroup file at PreUpdateContainerResources, which on cgroup v1 the plugin writes itself.
type filesHook struct{ value *atomic.Value }

func (filesHook) Name() string { return "files" }
func (h filesHook) PreUpdateContainerResources(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	v, _ := h.value.Load().(string)
	if v == "" {
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{Unified: map[string]string{"cpu.test_weight": v}}}, nil
}

// TestRefreshWritesFilesOnly: a refresh whose only change is a file containerd cannot take on cgroup v1
// writes it to the running container's cgroup and returns; it leaves the container's events free.
func TestRefreshWritesFilesOnly(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	sock := shortSocket(t)
	rt := startRuntime(t, sock, nil, nil)
	value := &atomic.Value{}
	n := startNode(t, ctx, sock, hooks.Registration{Name: "files", Order: 900, Timeout: time.Second,
		FailurePolicy: hooks.Ignore, New: func() (hooks.Hook, error) { return filesHook{value: value}, nil }})
	pod := sandbox("web", "LS")
	c := container(pod, "app", 500)
	createRunning(t, ctx, rt, n, pod, c)
	value.Store("7")
	done := make(chan error, 1)
	go func() { done <- n.plugin.Refresh(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Refresh: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Refresh did not return within 5s")
	}
	dir := cgroup.ContainerPaths(pod.Linux.CgroupParent, c.Id)[0]
	if s, ok := n.cgroups.get(dir); !ok || s.Files["cpu.test_weight"] != "7" {
		t.Fatalf("container cgroup %s writes = %+v (written %v), want cpu.test_weight 7", dir, s, ok)
	}
	if _, err := rt.r.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: c}); err != nil {
		t.Fatalf("StopContainer after the refresh: %v", err)
	}
}
