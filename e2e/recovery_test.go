//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"reflect"
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

// TestKillRecoveryPools: SIGKILL tandem-proxy while 20 pods of every class run (one LSE pod holding a CPU
// of its own, LS and BE pods) and start it again. Its CPU pools and exclusive allocations come back
// exactly as they were, bound to the same containers; every container keeps its cpuset and the store
// its pods; the policies hold (a second LSE pod finds no free CPU); and once the pods are gone the pools
// and the store are as before the first pod: nothing leaked. TestNRIPluginKillRecovery runs the same
// with tandem-nri, Tandem as containerd's NRI plugin.
func TestKillRecoveryPools(t *testing.T) {
	forEachRuntime(t, envOptions{}, testKillRecoveryPools)
}

func testKillRecoveryPools(t *testing.T, ctx context.Context, e *env) {
	empty := poolsOf(t, ctx, e)
	if len(empty.Allocations) != 0 {
		t.Fatalf("/debug/pools before any pod = %+v, want no allocation", empty)
	}
	lsePod, lse, err := classPod(t, ctx, e, e.viaProxy, "recover-lse", "LSE", 1000)
	if err != nil {
		t.Fatal(err)
	}
	classes := make([]string, recoveryPods-1)
	for i := range classes {
		classes[i] = []string{"LS", "BE"}[i%2]
	}
	pods := append([]classPodIDs{{id: lsePod, ctr: lse}}, startClassPods(t, ctx, e, "recover", classes)...)
	cpusets := map[string]string{}
	for _, p := range pods {
		cpusets[p.ctr] = cpusetOf(t, ctx, e, p.ctr)
	}
	before := poolsOf(t, ctx, e)
	if len(before.Allocations) != 1 {
		t.Fatalf("/debug/pools with an LSE pod = %+v, want its one allocation", before)
	}

	if err := e.proxy.Kill(); err != nil {
		t.Fatalf("SIGKILL tandem-proxy: %v", err)
	}
	if err := e.proxy.Restart(ctx); err != nil {
		t.Fatalf("restart tandem-proxy: %v", err)
	}
	waitVersion(t, ctx, e)

	if after := poolsOf(t, ctx, e); !reflect.DeepEqual(after, before) {
		t.Errorf("/debug/pools after the restart = %+v, want %+v as before", after, before)
	}
	store := storeOf(t, ctx, e)
	for _, p := range pods {
		if findPod(store, p.id) == nil {
			t.Errorf("/debug/store after the restart lacks pod %s", p.id)
		}
		if c := findContainer(store, p.ctr); c == nil || c.State != "CONTAINER_RUNNING" {
			t.Errorf("/debug/store container %s after the restart = %+v, want CONTAINER_RUNNING", p.ctr, c)
		}
		if got := cpusetOf(t, ctx, e, p.ctr); got != cpusets[p.ctr] {
			t.Errorf("container %s after the restart: cpuset %s, want %s as before", p.ctr, got, cpusets[p.ctr])
		}
	}
	if len(store.Pods) != recoveryPods || len(store.Containers) != recoveryPods {
		t.Errorf("/debug/store after the restart holds %d pods and %d containers, want %d of each", len(store.Pods), len(store.Containers), recoveryPods)
	}
	lse2, _, err := classPod(t, ctx, e, e.viaProxy, "recover-lse2", "LSE", 1000)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second LSE container after the restart: %v, want ResourceExhausted", err)
	}

	// Every pod goes, as kubelet removes them: the pools and the store are as before the first one.
	for _, id := range append(podIDs(pods), lse2) {
		if err := framework.RemovePod(ctx, e.viaProxy, id); err != nil {
			t.Errorf("remove pod %s: %v", id, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, s := poolsOf(t, ctx, e), storeOf(t, ctx, e)
		if reflect.DeepEqual(p, empty) && len(s.Pods) == 0 && len(s.Containers) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after the last pod went: /debug/pools = %+v (want %+v), /debug/store holds %d pods and %d containers (want none)",
				p, empty, len(s.Pods), len(s.Containers))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func podIDs(pods []classPodIDs) []string {
	ids := make([]string, len(pods))
	for i, p := range pods {
		ids[i] = p.id
	}
	return ids
}

// startClassPods runs pods (name-NN) of one container of the given classes, without CPU requests, four
// at a time as a busy kubelet would; they are removed when the test ends. It returns their ids in
// order.
func startClassPods(t *testing.T, ctx context.Context, e *env, name string, classes []string) []classPodIDs {
	t.Helper()
	pods := make([]classPodIDs, len(classes))
	errs := make([]error, len(classes))
	sem := make(chan struct{}, 4) // enough to overlap runc's waits on two CPUs
	done := make(chan struct{})
	for i, class := range classes {
		go func() {
			defer func() { done <- struct{}{} }()
			sem <- struct{}{}
			defer func() { <-sem }()
			cfg := framework.PodSandboxConfig(fmt.Sprintf("%s-%02d", name, i), "e2e", true)
			cfg.Labels["koordinator.sh/qosClass"] = class
			podID, err := e.viaProxy.RunPodSandbox(ctx, cfg, "")
			if err != nil {
				errs[i] = err
				return
			}
			pods[i] = classPodIDs{id: podID, uid: cfg.Metadata.Uid}
			cc := framework.ContainerConfig("app", framework.SleepCommand()...)
			if pods[i].ctr, err = e.viaProxy.CreateContainer(ctx, podID, cc, cfg); err != nil {
				errs[i] = fmt.Errorf("%s: %w", cfg.Metadata.Name, err)
				return
			}
			errs[i] = e.viaProxy.StartContainer(ctx, pods[i].ctr)
		}()
	}
	for range classes {
		<-done
	}
	for i := range pods {
		removeAtCleanup(t, ctx, e, pods[i].id)
		if errs[i] != nil {
			t.Errorf("pod %s-%02d: %v", name, i, errs[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return pods
}
