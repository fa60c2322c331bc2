package proxy

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/store"
)

// seededRuntime holds one pod with two containers, "kept" and "adopted".
func seededRuntime(t *testing.T) *fakeRuntime {
	t.Helper()
	rt := newFakeRuntime()
	ctx := testCtx(t)
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("web", nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kept", "adopted"} {
		c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: ctrConfig(name)})
		if err != nil {
			t.Fatal(err)
		}
		_ = rt.setState(c.ContainerId, runtimeapi.ContainerState_CONTAINER_RUNNING)
	}
	return rt
}

func TestRecoverReconcilesCheckpointWithRuntime(t *testing.T) {
	t.Parallel()
	rt := seededRuntime(t)
	stateDir := t.TempDir()
	// The checkpoint of an earlier run: "kept" with a policy decision the runtime does not report, and
	// "gone", which died while the proxy was down.
	cp, err := store.NewCheckpoint(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	err = cp.Save(func() *store.Snapshot {
		return &store.Snapshot{
			Pods: []*store.Pod{{ID: "pod-1", Name: "web", Namespace: "default", CgroupParent: "/kubepods/besteffort/podweb-uid"}},
			Containers: []*store.Container{
				{ID: "ctr-2", PodSandboxID: "pod-1", Name: "kept", Resources: &hooks.Resources{CpusetCpus: "2-3", CPUShares: 2}},
				{ID: "ctr-9", PodSandboxID: "pod-1", Name: "gone", Resources: &hooks.Resources{CpusetCpus: "4"}},
			},
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{rt: rt, stateDir: stateDir})

	kept, ok := h.srv.Store().Container("ctr-2")
	if !ok || kept.Resources.CpusetCpus != "2-3" || kept.State != "CONTAINER_RUNNING" {
		t.Fatalf("kept = %+v, want the checkpoint's cpuset 2-3 and the runtime's state", kept)
	}
	adopted, ok := h.srv.Store().Container("ctr-3")
	if !ok || adopted.Name != "adopted" || adopted.Resources == nil || adopted.Resources.MemoryLimitInBytes != 64<<20 {
		t.Fatalf("adopted = %+v, want resources read back from the runtime", adopted)
	}
	if _, ok := h.srv.Store().Container("ctr-9"); ok {
		t.Fatal("container gone from the runtime is still stored")
	}
	if got := testutil.ToFloat64(h.srv.metrics.released); got != 1 {
		t.Fatalf("released containers metric = %v, want 1 (ctr-9)", got)
	}
	if p, _ := h.srv.Store().Pod("pod-1"); p.CgroupParent != "/kubepods/besteffort/podweb-uid" {
		t.Fatalf("pod cgroup parent = %q", p.CgroupParent)
	}
	disk, err := cp.Load()
	if err != nil || len(disk.Containers) != 2 {
		t.Fatalf("checkpoint after recovery = %+v, %v; want the two live containers", disk, err)
	}
}

func TestRecoverWithoutCheckpointReadsCgroupParent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{rt: seededRuntime(t)})
	p, ok := h.srv.Store().Pod("pod-1")
	if !ok || p.CgroupParent != "/kubepods/besteffort/podweb-uid" || p.State != "SANDBOX_READY" {
		t.Fatalf("pod = %+v, want the cgroup parent from the verbose sandbox status", p)
	}
	if n := len(h.srv.Store().Snapshot().Containers); n != 2 {
		t.Fatalf("containers = %d, want 2", n)
	}
}

func TestRecoverSetsAsideCorruptCheckpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
	}{
		{"not json", "{{{"},
		{"torn write", `{"version":1,"checksum":"00","data":{"pods":[]`},
		{"checksum mismatch", `{"version":1,"checksum":"00","data":{"pods":[],"containers":[]}}`},
		{"unknown version", `{"version":99,"checksum":"","data":{}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stateDir := t.TempDir()
			if err := os.WriteFile(filepath.Join(stateDir, store.CheckpointFile), []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, harnessOpts{rt: seededRuntime(t), stateDir: stateDir})
			if n := len(h.srv.Store().Snapshot().Containers); n != 2 {
				t.Fatalf("containers = %d, want 2 rebuilt from the runtime", n)
			}
			aside, _ := filepath.Glob(filepath.Join(stateDir, store.CheckpointFile+".corrupt-*"))
			if len(aside) != 1 {
				t.Fatalf("set-aside files = %v, want one", aside)
			}
			if b, _ := os.ReadFile(aside[0]); string(b) != tt.content {
				t.Fatalf("set-aside content = %q, want the original", b)
			}
			if _, err := h.srv.checkpoint.Load(); err != nil {
				t.Fatalf("new checkpoint unreadable: %v", err)
			}
		})
	}
}

func TestResyncReleasesContainersThatDied(t *testing.T) {
	t.Parallel()
	rt := seededRuntime(t)
	h := newHarness(t, harnessOpts{rt: rt})
	// The runtime loses a container behind the proxy's back (kubelet talked to it directly, or it was
	// removed while the proxy was down).
	rt.mu.Lock()
	delete(rt.ctrs, "ctr-2")
	rt.mu.Unlock()
	h.srv.reconcileNow <- struct{}{}
	polltest.Within(t, 5*time.Second, "the resync to release the dead container", func() bool {
		_, ok := h.srv.Store().Container("ctr-2")
		return !ok
	})
	if got := testutil.ToFloat64(h.srv.metrics.released); got != 1 {
		t.Fatalf("released containers metric = %v, want 1", got)
	}
}
