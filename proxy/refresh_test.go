package proxy

import (
	"context"
	"strconv"
	"sync"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// quotaHook decides a container and a pod CFS quota on every update, as batchresource does under a BE
// clamp that moves.
type quotaHook struct {
	mu       sync.Mutex
	ctr, pod int64
}

func (h *quotaHook) Name() string { return "test-quota" }

func (h *quotaHook) set(ctr, pod int64) {
	h.mu.Lock()
	h.ctr, h.pod = ctr, pod
	h.mu.Unlock()
}

func (h *quotaHook) PreUpdateContainerResources(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &hooks.Adjustment{
		Resources:    &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(h.ctr), CPUPeriod: hooks.Int64(100000)},
		PodResources: &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(h.pod)},
	}, nil
}

// orderWriter records, at each pod cgroup write, the container quota the runtime had been sent by then.
type orderWriter struct {
	cgroup.Writer
	rt *fakeRuntime

	mu   sync.Mutex
	seen []int64 // container quota already sent when the pod cgroup was written; 0 for none
}

func (w *orderWriter) Write(parent string, s cgroup.Settings) error {
	w.rt.mu.Lock()
	sent := w.rt.lastUpdate.GetLinux().GetCpuQuota()
	w.rt.mu.Unlock()
	w.mu.Lock()
	w.seen = append(w.seen, sent)
	w.mu.Unlock()
	return w.Writer.Write(parent, s)
}

func (w *orderWriter) last() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[len(w.seen)-1]
}

// TestRefresh checks the synchronous refresh the suppress loop calls when it stops: it has moved every
// container when it returns, and it writes the pod cgroup after the container when the pod's quota
// falls and before it when it rises (cgroup v1 refuses a container above its pod).
func TestRefresh(t *testing.T) {
	t.Parallel()
	hook := &quotaHook{}
	cg := fakeCgroupV1(t, "/kubepods/besteffort/podbatch-uid", "cpu.cfs_quota_us", "cpu.cfs_period_us")
	rt := newFakeRuntime()
	w := &orderWriter{Writer: cg.writer, rt: rt}
	h := newHarness(t, harnessOpts{hooks: []hooks.Registration{{Name: hook.Name(), Order: 100, New: func() (hooks.Hook, error) { return hook, nil }}},
		cgroups: w, rt: rt})
	ctx := testCtx(t)
	rs := h.rs()
	pod, err := rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("batch", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: ctrConfig("work"), SandboxConfig: podConfig("batch", nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr.ContainerId}); err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name          string
		ctr, pod      int64
		wantSentFirst int64 // container quota the runtime had when the pod cgroup was written
	}{
		{name: "clamped: container first", ctr: 100000, pod: 100000, wantSentFirst: 100000},
		{name: "lifted: pod first", ctr: 150000, pod: 250000, wantSentFirst: 100000},
		{name: "unlimited pod: pod first", ctr: 150000, pod: -1, wantSentFirst: 150000},
	}
	for _, s := range steps {
		hook.set(s.ctr, s.pod)
		if err := h.srv.Refresh(ctx); err != nil {
			t.Fatalf("%s: Refresh: %v", s.name, err)
		}
		rt.mu.Lock()
		sent := rt.lastUpdate.GetLinux().GetCpuQuota()
		rt.mu.Unlock()
		if sent != s.ctr {
			t.Errorf("%s: runtime has container quota %d after Refresh returned, want %d", s.name, sent, s.ctr)
		}
		if got := w.last(); got != s.wantSentFirst {
			t.Errorf("%s: pod cgroup written when the container had %d, want %d", s.name, got, s.wantSentFirst)
		}
		if got := cg.read(t, "cpu.cfs_quota_us"); got != strconv.FormatInt(s.pod, 10) {
			t.Errorf("%s: pod cpu.cfs_quota_us = %s, want %d", s.name, got, s.pod)
		}
		if c, _ := h.srv.Store().Container(ctr.ContainerId); c.Resources.CPUQuota != s.ctr {
			t.Errorf("%s: stored container quota %d, want %d", s.name, c.Resources.CPUQuota, s.ctr)
		}
	}
}
