package proxy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
)

const burstFile = "cpu.cfs_burst_us"

// burstHook sets a container's CFS burst to its quota and puts it in an RDT class, as the cpuburst and
// resctrl policies do: container-level settings the runtime cannot carry everywhere.
type burstHook struct{}

var (
	_ hooks.PreCreateContainerHook          = burstHook{}
	_ hooks.PreUpdateContainerResourcesHook = burstHook{}
)

func (burstHook) Name() string { return "test-burst" }

func (burstHook) adjust(ctr *hooks.ContainerInfo) *hooks.Adjustment {
	if ctr.Resources == nil || ctr.Resources.CPUQuota <= 0 {
		return nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{
		Unified:  map[string]string{burstFile: strconv.FormatInt(ctr.Resources.CPUQuota, 10)},
		RDTClass: hooks.String("BE"),
	}}
}

func (h burstHook) PreCreateContainer(_ context.Context, _ *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return h.adjust(ctr), nil
}

func (h burstHook) PreUpdateContainerResources(_ context.Context, _ *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return h.adjust(ctr), nil
}

func (h burstHook) registration() []hooks.Registration {
	return []hooks.Registration{{Name: h.Name(), Order: 100, New: func() (hooks.Hook, error) { return h, nil }}}
}

// fakeRDT records the moves the proxy asks for.
type fakeRDT struct {
	mu    sync.Mutex
	moves []string
}

func (f *fakeRDT) Assign(_ context.Context, group, ctrCgroup string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.moves = append(f.moves, group+" "+ctrCgroup)
	return nil
}

func (f *fakeRDT) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.moves)
}

// TestContainerSettingsTheRuntimeCannotCarry: on cgroup v1, where runc refuses unified files, the proxy
// writes a hook's container files into the container's cgroup once it has started and again at each
// update, and keeps them from the runtime; on v2 the runtime gets them. On both, the container's tasks
// join the RDT class the hook named.
func TestContainerSettingsTheRuntimeCannotCarry(t *testing.T) {
	t.Parallel()
	const parent = "/kubepods/besteffort/podweb-uid"
	for _, version := range []int{1, 2} {
		t.Run("cgroup v"+strconv.Itoa(version), func(t *testing.T) {
			t.Parallel()
			// cgroup.New tells v2 by the root's cgroup.controllers, v1 by its cpu hierarchy.
			root := t.TempDir()
			hierarchy, marker := filepath.Join(root, "cpu"), "cpu/tasks"
			if version == 2 {
				hierarchy, marker = root, "cgroup.controllers"
			}
			touch(t, filepath.Join(root, marker))
			w, err := cgroup.New(root)
			if err != nil {
				t.Fatal(err)
			}
			rdt := &fakeRDT{}
			h := newHarness(t, harnessOpts{hooks: burstHook{}.registration(), cgroups: w, rdt: rdt})
			ctx := testCtx(t)
			rs := h.rs()
			pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web", nil)})
			if err != nil {
				t.Fatal(err)
			}
			cfg := ctrConfig("app")
			cfg.Linux.Resources.CpuQuota, cfg.Linux.Resources.CpuPeriod = 50000, 100000
			ctr, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: cfg, SandboxConfig: podConfig("web", nil)})
			if err != nil {
				t.Fatal(err)
			}
			// The runtime makes the container's cgroup; here the test does.
			ctrDir := frontend.ContainerCgroup(parent, ctr.ContainerId)
			file := filepath.Join(hierarchy, ctrDir, burstFile)
			touch(t, file)
			sent := h.rt.lastCreate.GetConfig().GetLinux().GetResources().GetUnified()[burstFile]
			if want := map[int]string{1: "", 2: "50000"}[version]; sent != want {
				t.Fatalf("runtime got %s = %q at create, want %q", burstFile, sent, want)
			}
			if got := read(t, file); got != "" {
				t.Fatalf("%s written before the start: %q", burstFile, got)
			}
			stored, _ := h.srv.Store().Container(ctr.ContainerId)
			if stored.Resources.Unified[burstFile] != "50000" || stored.Resources.RDTClass != "BE" {
				t.Fatalf("store keeps %+v, want the hook's burst and RDT class", stored.Resources)
			}
			if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
				t.Fatal(err)
			}
			// On v2 the runtime writes the file; the fake runtime does not, so it stays empty.
			if got, want := read(t, file), map[int]string{1: "50000", 2: ""}[version]; got != want {
				t.Fatalf("%s after start = %q, want %q", burstFile, got, want)
			}
			if _, err := rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: ctr.ContainerId,
				Linux: &runtimeapi.LinuxContainerResources{CpuQuota: 100000, CpuPeriod: 100000}}); err != nil {
				t.Fatal(err)
			}
			sent = h.rt.lastUpdate.GetLinux().GetUnified()[burstFile]
			if want := map[int]string{1: "", 2: "100000"}[version]; sent != want {
				t.Fatalf("runtime got %s = %q at update, want %q", burstFile, sent, want)
			}
			if version == 1 {
				if got := read(t, file); got != "100000" {
					t.Fatalf("%s after update = %q, want 100000", burstFile, got)
				}
			}
			want := []string{"BE " + ctrDir, "BE " + ctrDir}
			if got := rdt.list(); !slices.Equal(got, want) {
				t.Fatalf("RDT moves = %q, want %q (at start and at the update)", got, want)
			}
		})
	}
}

// TestBurstLoweredBeforeTheQuota runs on the host's own cgroup v1 cpu controller, where the kernel
// enforces what a fake tree cannot: a quota below the current burst is refused, and so is a burst above
// the quota. The proxy writes a running container's files before it forwards an update, so a downward
// resize gets through, and again after it where that failed, so an upward one gets its raised burst.
func TestBurstLoweredBeforeTheQuota(t *testing.T) {
	const cpuRoot = "/sys/fs/cgroup/cpu"
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup under " + cpuRoot)
	}
	w, err := cgroup.New("/sys/fs/cgroup")
	if err != nil || w.Version() != 1 || !w.Supports(burstFile) {
		t.Skipf("needs cgroup v1 with %s (have: %v)", burstFile, err)
	}
	parent := "/tandem-proxy-test-" + strconv.Itoa(os.Getpid())
	var dir string
	setQuota := func(q int64) error {
		return os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(q, 10)), 0)
	}
	rt := newFakeRuntime()
	// As runc does: the update writes the quota into the container's cgroup.
	rt.onUpdate = func(req *runtimeapi.UpdateContainerResourcesRequest) error {
		return setQuota(req.GetLinux().GetCpuQuota())
	}
	h := newHarness(t, harnessOpts{hooks: burstHook{}.registration(), cgroups: w, rt: rt})
	ctx := testCtx(t)
	rs := h.rs()
	podCfg := podConfig("burst", nil)
	podCfg.Linux.CgroupParent = parent
	pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ctrConfig("app")
	cfg.Linux.Resources.CpuQuota, cfg.Linux.Resources.CpuPeriod = 200000, 100000
	ctr, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		t.Fatal(err)
	}
	// The cgroup runc would make at create, with the quota it would write.
	dir = filepath.Join(cpuRoot, frontend.ContainerCgroup(parent, ctr.ContainerId))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Join(cpuRoot, parent))
	})
	if err := setQuota(200000); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir, burstFile)); got != "200000" {
		t.Fatalf("burst after start = %s, want 200000", got)
	}
	if setQuota(100000) == nil {
		t.Fatal("the kernel took a quota below the burst; the order of writes is moot")
	}
	if _, err := rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: ctr.ContainerId,
		Linux: &runtimeapi.LinuxContainerResources{CpuQuota: 100000, CpuPeriod: 100000}}); err != nil {
		t.Fatalf("a downward resize failed: %v", err)
	}
	if got := read(t, filepath.Join(dir, burstFile)); got != "100000" {
		t.Fatalf("burst after resize = %s, want 100000", got)
	}
	if got := read(t, filepath.Join(dir, "cpu.cfs_quota_us")); got != "100000" {
		t.Fatalf("quota after resize = %s, want 100000", got)
	}
	// An upward resize: the raised burst is refused before the quota rises and must land after it.
	if _, err := rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: ctr.ContainerId,
		Linux: &runtimeapi.LinuxContainerResources{CpuQuota: 300000, CpuPeriod: 100000}}); err != nil {
		t.Fatalf("an upward resize failed: %v", err)
	}
	if got := read(t, filepath.Join(dir, burstFile)); got != "300000" {
		t.Fatalf("burst after the upward resize = %s, want 300000", got)
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
