//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/proxy"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// issue12Spec is a BE container with a batch-cpu limit of 1500m, the issue's case.
const issue12Spec = `{"containers":{"c0":{"requests":{"kubernetes.io/batch-cpu":"1k"},"limits":{"kubernetes.io/batch-cpu":"1500"}}}}`

// TestIssue12SuppressCFSQuota reproduces issue 12's case on real containerd and runc, on this cgroup v1
// host, under a cgroup root of the test's own (never the host's /kubepods), wired as tandem-proxy wires
// it (the loop's QuotaCeiling into batchresource, the proxy's Refresh into the loop):
//
//  1. A BE container with a 1500m batch-cpu limit runs; the loop clamps the BE parent to one CPU (the
//     container is capped to 100000 first, as the kernel requires) and a second such BE container
//     starts under the clamp. The kernel's own refusal is shown: writing its 150000 back fails EINVAL.
//  2. A reload disables suppression with no new sample: the parent is -1 and both containers are back
//     at 150000/100000 within seconds.
//  3. Suppression on again, then the loop stops (SIGTERM): once Run returned and Restore lifted, the parent is -1 and the
//     containers have their limits back.
//  4. A clamp left by a run that could not lift (SIGKILL) is lifted by the next loop's start.
//
// The usage snapshots are made by the test (LS at 1000m on a 2-CPU node, threshold 55%: BE gets the
// one-CPU floor), so the clamp's level is known; TestSuppressAndEvict drives the loop from real usage.
func TestIssue12SuppressCFSQuota(t *testing.T) {
	requireRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err != nil {
		t.Skip("SKIPPED: this test reproduces cgroup v1's child-above-parent rule, and this host has no v1 cpu hierarchy")
	}
	for _, flavor := range flavors() {
		t.Run("containerd-"+flavor, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			h := startIssue12Harness(t, ctx, flavor)
			loopCtx, stopLoop := context.WithCancel(ctx)
			loopDone := h.run(loopCtx)
			t.Cleanup(func() { stopLoop(); <-loopDone })

			// 1. Clamp with a 1500m BE container running; a new one starts under the clamp.
			pod1, before := h.bePod(t, ctx, "be-before")
			h.waitQuota(t, filepath.Join(pod1, before), "150000", 10*time.Second)
			h.load(2)
			h.waitQuota(t, "", "100000", 10*time.Second)
			for _, c := range []string{pod1, filepath.Join(pod1, before)} {
				if got := h.quota(t, c); got != "100000" {
					t.Errorf("%s, running under the clamp: quota %s, want 100000 (capped before the parent)", c, got)
				}
			}
			pod2, during := h.bePod(t, ctx, "be-during")
			t.Logf("BE container with a 1500m limit started while the BE parent is clamped to one CPU")
			for _, c := range []string{pod2, filepath.Join(pod2, during)} {
				if got := h.quota(t, c); got != "100000" {
					t.Errorf("%s under the clamp: quota %s, want 100000", c, got)
				}
			}
			// The kernel rule is real here: the limit itself is refused while the parent is clamped.
			err := os.WriteFile(filepath.Join("/sys/fs/cgroup/cpu", pod2, during, "cpu.cfs_quota_us"), []byte("150000"), 0)
			if !errors.Is(err, syscall.EINVAL) {
				t.Errorf("writing 150000 under a 100000 parent: %v, want EINVAL (cgroup v1's rule)", err)
			}

			// 2. Disabled by a reload: no new sample is fed, the loop wakes.
			off := h.cfg
			off.Enable = false
			if err := h.loop.Reconfigure(off); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			h.waitQuota(t, "", "-1", 5*time.Second)
			for _, c := range []string{filepath.Join(pod1, before), filepath.Join(pod2, during), pod1, pod2} {
				h.waitQuota(t, c, "150000", 10*time.Second)
			}
			t.Logf("disabled: parent -1 and the containers back at 150000 %v after the reload", time.Since(start).Round(time.Millisecond))
			if got := h.readFile(t, filepath.Join(pod2, during), "cpu.cfs_period_us"); got != "100000" {
				t.Errorf("period %s, want 100000", got)
			}

			// 3. On again, then stop.
			if err := h.loop.Reconfigure(h.cfg); err != nil {
				t.Fatal(err)
			}
			h.load(3)
			h.waitQuota(t, "", "100000", 10*time.Second)
			h.waitQuota(t, filepath.Join(pod2, during), "100000", 5*time.Second)
			stopLoop()
			<-loopDone
			for c, want := range map[string]string{"": "-1", filepath.Join(pod1, before): "150000", filepath.Join(pod2, during): "150000"} {
				if got := h.quota(t, c); got != want {
					t.Errorf("when Run returned: %q quota %s, want %s", c, got, want)
				}
			}

			// 4. A stale clamp, as a SIGKILLed run leaves it: children capped, then the parent, and the
			// proxy's record of the containers at the capped quota (an update through the proxy, which
			// the policy caps at the clamped parent, as the killed run's refresh did).
			for _, c := range []string{filepath.Join(pod1, before), filepath.Join(pod2, during), pod1, pod2} {
				h.writeQuota(t, c, "100000")
			}
			h.writeQuota(t, "", "100000")
			for _, id := range []string{before, during} {
				if err := h.viaProxy.UpdateContainerResources(ctx, id, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 150000}}); err != nil {
					t.Fatal(err)
				}
				if c, _ := h.srv.Store().Container(id); c.Resources.CPUQuota != 100000 {
					t.Fatalf("the proxy records quota %d for %s under the stale clamp, want 100000", c.Resources.CPUQuota, id[:12])
				}
			}
			if err := h.loop.Reconfigure(off); err != nil {
				t.Fatal(err)
			}
			again, cancel := context.WithCancel(ctx)
			defer cancel()
			done := h.run(again)
			h.waitQuota(t, "", "-1", 5*time.Second)
			for _, c := range []string{filepath.Join(pod1, before), filepath.Join(pod2, during)} {
				h.waitQuota(t, c, "150000", 10*time.Second)
			}
			cancel()
			<-done
		})
	}
}

// issue12Harness is containerd, an in-process proxy with the qos and batchresource policies and the
// suppress loop with the cfsQuota policy on a BE parent of the test's own.
type issue12Harness struct {
	root     string // the test's cgroup root, e.g. /tdm-i12-123
	beParent string // <root>/kubepods/besteffort
	srv      *proxy.Server
	viaProxy internalapi.RuntimeService
	direct   internalapi.RuntimeService
	loop     *suppress.Loop
	cfg      suppress.Config
	snap     atomic.Pointer[collector.Snapshot]
	updates  chan struct{}
}

func startIssue12Harness(t *testing.T, ctx context.Context, flavor string) *issue12Harness {
	t.Helper()
	dir, ctrd := privateContainerd(t, ctx, flavor, "tdm-i12-")
	h := &issue12Harness{root: fmt.Sprintf("/tdm-i12-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6), updates: make(chan struct{}, 1)}
	h.beParent = h.root + "/kubepods/besteffort"
	// kubelet makes the QoS cgroups; runc makes the rest of the path in the other hierarchies.
	if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup/cpu", h.beParent), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroupTree(t, h.root) })

	cgroups, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	refresh := make(chan struct{}, 1)
	poolsChanged := func() {
		select {
		case refresh <- struct{}{}:
		default:
		}
	}
	h.cfg = suppress.DefaultConfig()
	h.cfg.Enable, h.cfg.CPUSuppressPolicy, h.cfg.BECgroupParent = true, suppress.PolicyCFSQuota, h.beParent
	h.cfg.CPUSuppressThresholdPercent, h.cfg.Interval = 55, 100*time.Millisecond
	// The loop first, as batchresource reads its ceiling; the proxy it refreshes through comes after.
	var srv atomic.Pointer[proxy.Server]
	h.loop, err = suppress.New(h.cfg, suppress.Deps{Latest: h.snap.Load, Updates: h.updates, Cgroups: cgroups,
		PoolsChanged: poolsChanged, Refresh: func(ctx context.Context) error { return srv.Load().Refresh(ctx) }})
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.DefaultConfig()
	pol.Enabled = []string{"qos", "batchresource"}
	d, err := hooks.NewDispatcher(ctx, policy.Builtin(pol, policy.Deps{Cgroups: cgroups, PoolsChanged: poolsChanged, BEQuotaCeiling: h.loop.QuotaCeiling}), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.DefaultConfig()
	cfg.Listen = filepath.Join(dir, "tandem.sock")
	cfg.RuntimeEndpoint = ctrd.Endpoint
	cfg.StateDir = filepath.Join(dir, "state")
	h.srv, err = proxy.New(cfg, frontend.Deps{Hooks: d, Cgroups: cgroups, Refresh: refresh})
	if err != nil {
		t.Fatal(err)
	}
	srv.Store(h.srv)
	if err := h.srv.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	lis, err := proxy.Listen(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- h.srv.Serve(sctx, lis) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = h.srv.Close()
		// Whatever happened above, leave no clamp behind.
		_ = cgroups.Write(h.beParent, cgroup.Settings{CPUQuota: ptr(int64(-1))})
	})
	if h.viaProxy, _, err = framework.NewCRIClients(ctx, "unix://"+cfg.Listen); err != nil {
		t.Fatal(err)
	}
	if h.direct, _, err = framework.NewCRIClients(ctx, ctrd.Endpoint); err != nil {
		t.Fatal(err)
	}
	return h
}

func ptr[T any](v T) *T { return &v }

// run starts the loop and returns a channel closed when it stopped as the agent stops it: Run returned
// and Restore lifted what was in force.
func (h *issue12Harness) run(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		_ = h.loop.Run(ctx)
		_ = h.loop.Restore(context.WithoutCancel(ctx))
		close(done)
	}()
	return done
}

// load feeds the loop a sample of a 2-CPU node whose LS pods use 1000m: 2000 × 55% − 1000 − 100 leaves
// BE the floor, one CPU.
func (h *issue12Harness) load(sec int64) {
	h.snap.Store(&collector.Snapshot{
		Time:       time.Unix(sec, 0),
		Capacity:   collector.Usage{CPUMilli: 2000, MemoryBytes: 8 << 30},
		System:     collector.Usage{CPUMilli: 100},
		Node:       collector.Usage{CPUMilli: 1100},
		Containers: []collector.ContainerUsage{{Target: collector.Target{Namespace: "e2e", Pod: "ls", Container: "app", QoS: "LS"}, Usage: collector.Usage{CPUMilli: 1000}}},
	})
	select {
	case h.updates <- struct{}{}:
	default:
	}
}

// bePod runs a BE pod with issue12Spec's container through the proxy, in a pod cgroup under the test's BE
// parent, and returns the pod's cgroup parent and the container id.
func (h *issue12Harness) bePod(t *testing.T, ctx context.Context, name string) (string, string) {
	t.Helper()
	uid := framework.NewUID()
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	cfg.Metadata.Uid = uid
	cfg.Linux.CgroupParent = h.beParent + "/pod" + uid
	cfg.Labels["koordinator.sh/qosClass"] = "BE"
	cfg.Annotations["node.koordinator.sh/extended-resource-spec"] = issue12Spec
	podID, ids, err := framework.RunPod(ctx, h.viaProxy, cfg, 1)
	if podID != "" {
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_ = framework.RemovePod(cctx, h.direct, podID)
		})
	}
	if err != nil {
		t.Fatalf("BE pod %s with a 1500m batch-cpu limit: %v", name, err)
	}
	return cfg.Linux.CgroupParent, ids[0]
}

func (h *issue12Harness) readFile(t *testing.T, cg, file string) string {
	t.Helper()
	if cg == "" {
		cg = h.beParent
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", cg, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// quota reads a cgroup's cpu.cfs_quota_us; "" is the BE parent.
func (h *issue12Harness) quota(t *testing.T, cg string) string {
	t.Helper()
	return h.readFile(t, cg, "cpu.cfs_quota_us")
}

func (h *issue12Harness) writeQuota(t *testing.T, cg, v string) {
	t.Helper()
	if cg == "" {
		cg = h.beParent
	}
	if err := os.WriteFile(filepath.Join("/sys/fs/cgroup/cpu", cg, "cpu.cfs_quota_us"), []byte(v), 0); err != nil {
		t.Fatal(err)
	}
}

func (h *issue12Harness) waitQuota(t *testing.T, cg, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := h.quota(t, cg)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			name := cg
			if name == "" {
				name = h.beParent + " (BE parent)"
			}
			t.Fatalf("%s: cpu.cfs_quota_us %s after %v, want %s", name, got, within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeCgroupTree removes a test's cgroup root from every hierarchy, deepest first (rmdir removes only
// empty cgroups; the pods are gone by then).
func removeCgroupTree(t *testing.T, root string) {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, hier := range hierarchies {
		top := filepath.Join(hier, root)
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove the test's cgroup %s: %v", d, err)
			}
		}
	}
}
