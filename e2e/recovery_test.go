//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

const recoveryPods = 20

// TestProxyKillRecovery: SIGKILL tandem-proxy while 20 pods run and start it
// again. It must rebuild its store from the runtime (all pods and
// containers visible at /debug/store), leave the pods alone (same ids, still
// running, containers not restarted), and serve calls again.
func TestProxyKillRecovery(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		pods := make([]string, recoveryPods)
		ctrs := make([]string, recoveryPods)
		var wg sync.WaitGroup
		var mu sync.Mutex
		sem := make(chan struct{}, 4) // enough to overlap runc's waits on two CPUs
		for i := range recoveryPods {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				podID, ids := e.runPod(t, ctx, e.viaProxy, fmt.Sprintf("recover-%02d", i), true, 1)
				mu.Lock()
				pods[i], ctrs[i] = podID, ids[0]
				mu.Unlock()
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		startedAt := map[string]int64{}
		for _, id := range ctrs {
			st, err := e.direct.ContainerStatus(ctx, id, false)
			if err != nil {
				t.Fatal(err)
			}
			startedAt[id] = st.GetStatus().GetStartedAt()
		}
		oldPID := e.proxy.PID()

		if err := e.proxy.Kill(); err != nil {
			t.Fatalf("SIGKILL tandem-proxy: %v", err)
		}
		if _, err := e.viaProxy.Version(ctx, "v1"); status.Code(err) != codes.Unavailable {
			t.Errorf("Version while the proxy is dead: %v, want Unavailable", err)
		}
		if err := e.proxy.Restart(ctx); err != nil {
			t.Fatalf("restart tandem-proxy: %v", err)
		}
		if e.proxy.PID() == oldPID {
			t.Fatalf("tandem-proxy pid %d unchanged: it was not restarted", oldPID)
		}
		// The client saw connections refused and backs off (at most 3s in
		// cri-client); kubelet's next relist reconnects the same way.
		waitServing(t, ctx, e, 15*time.Second)

		store := storeOf(t, ctx, e)
		for i := range recoveryPods {
			if p := findPod(store, pods[i]); p == nil || p.State != "SANDBOX_READY" || p.Name != fmt.Sprintf("recover-%02d", i) || p.Namespace != "e2e" {
				t.Errorf("/debug/store pod %s after restart = %+v, want recover-%02d in e2e, SANDBOX_READY", pods[i], p, i)
			}
			if c := findContainer(store, ctrs[i]); c == nil || c.State != "CONTAINER_RUNNING" || c.PodSandboxID != pods[i] || c.Name != "c0" {
				t.Errorf("/debug/store container %s after restart = %+v, want c0 of pod %s, CONTAINER_RUNNING", ctrs[i], c, pods[i])
			}
		}
		if len(store.Pods) != recoveryPods || len(store.Containers) != recoveryPods {
			t.Errorf("/debug/store after restart holds %d pods and %d containers, want %d of each", len(store.Pods), len(store.Containers), recoveryPods)
		}

		// The pods were not touched: the runtime still has each one running,
		// started at the same moment as before.
		for i := range recoveryPods {
			pst, err := e.direct.PodSandboxStatus(ctx, pods[i], false)
			if err != nil || pst.GetStatus().GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
				t.Errorf("pod %s after the proxy restart: %v, err %v; want SANDBOX_READY", pods[i], pst.GetStatus().GetState(), err)
			}
			st, err := e.viaProxy.ContainerStatus(ctx, ctrs[i], false)
			if err != nil {
				t.Errorf("ContainerStatus %s through the restarted proxy: %v", ctrs[i], err)
				continue
			}
			if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || st.GetStatus().GetStartedAt() != startedAt[ctrs[i]] {
				t.Errorf("container %s after the proxy restart: %v started at %d, want RUNNING started at %d",
					ctrs[i], st.GetStatus().GetState(), st.GetStatus().GetStartedAt(), startedAt[ctrs[i]])
			}
		}

		// Calls work: exec into an old container, run and remove a new pod.
		out, _, err := e.viaProxy.ExecSync(ctx, ctrs[0], []string{"echo", "still here"}, 10*time.Second)
		if err != nil || string(out) != "still here\n" {
			t.Errorf("ExecSync through the restarted proxy = %q, %v", out, err)
		}
		cfg := framework.PodSandboxConfig("after-restart", "e2e", true)
		podID, ids, err := framework.RunPod(ctx, e.viaProxy, cfg, 1)
		if err != nil {
			t.Fatalf("run a pod through the restarted proxy: %v", err)
		}
		if c := findContainer(storeOf(t, ctx, e), ids[0]); c == nil || c.State != "CONTAINER_RUNNING" {
			t.Errorf("/debug/store container of a pod run after the restart = %+v, want CONTAINER_RUNNING", c)
		}
		if err := framework.RemovePod(ctx, e.viaProxy, podID); err != nil {
			t.Errorf("remove a pod through the restarted proxy: %v", err)
		}
	})
}

// TestContainerdRestart: containerd goes away under a running proxy. Calls
// through the proxy must fail with Unavailable while it is down, and work
// again once it is back, without restarting the proxy; the pod survives.
func TestContainerdRestart(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		_, ids := e.runPod(t, ctx, e.viaProxy, "survivor", true, 1)
		proxyPID := e.proxy.PID()

		for _, tc := range []struct {
			name string
			stop func(ctx context.Context) error
		}{
			{name: "SIGTERM", stop: e.containerd.StopDaemon},
			{name: "SIGKILL", stop: func(context.Context) error { return e.containerd.Kill() }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.stop(ctx); err != nil {
					t.Fatalf("stop containerd: %v", err)
				}
				calls := []struct {
					name string
					call func(ctx context.Context) error
				}{
					{"Version", func(ctx context.Context) error { _, err := e.viaProxy.Version(ctx, "v1"); return err }},
					{"ListContainers", func(ctx context.Context) error { _, err := e.viaProxy.ListContainers(ctx, nil); return err }},
					{"ContainerStatus", func(ctx context.Context) error {
						_, err := e.viaProxy.ContainerStatus(ctx, ids[0], false)
						return err
					}},
					{"ListImages", func(ctx context.Context) error { _, err := e.viaProxyImages.ListImages(ctx, nil); return err }},
				}
				for _, c := range calls {
					cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
					start := time.Now()
					err := c.call(cctx)
					cancel()
					if status.Code(err) != codes.Unavailable {
						t.Errorf("%s through the proxy while containerd is down: %v, want Unavailable", c.name, err)
					} else if d := time.Since(start); d > 10*time.Second {
						t.Errorf("%s took %s to fail: kubelet needs a fast Unavailable", c.name, d)
					}
				}

				if err := e.containerd.StartDaemon(ctx); err != nil {
					t.Fatalf("start containerd again: %v", err)
				}
				waitServing(t, ctx, e, 30*time.Second)
				if got := e.proxy.PID(); got != proxyPID {
					t.Fatalf("tandem-proxy pid = %d, want %d: it must survive a runtime restart", got, proxyPID)
				}
				st, err := e.viaProxy.ContainerStatus(ctx, ids[0], false)
				if err != nil || st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
					t.Errorf("container after the containerd restart: %v, err %v; want RUNNING", st.GetStatus().GetState(), err)
				}
				out, _, err := e.viaProxy.ExecSync(ctx, ids[0], []string{"echo", "ok"}, 10*time.Second)
				if err != nil || string(out) != "ok\n" {
					t.Errorf("ExecSync through the proxy after the containerd restart = %q, %v", out, err)
				}
			})
		}
	})
}

// waitServing polls Version through the proxy until it answers.
func waitServing(t *testing.T, ctx context.Context, e *env, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < timeout {
		if _, err = e.viaProxy.Version(ctx, "v1"); err == nil {
			t.Logf("calls through the proxy work again after %s", time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("Version through the proxy still fails after %s: %v", timeout, err)
}
