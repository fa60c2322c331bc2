//go:build e2e

package e2e

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
)

// forNRI runs fn as a subtest per containerd flavor with tandem-nri, Tandem as containerd's NRI plugin,
// each on a fresh containerd and plugin. Kubelet's side, e.viaProxy, is then a connection to containerd
// itself. Containerd 1.6 is skipped: its NRI is version 0.1, which runs binaries and has no plugin
// socket.
func forNRI(t *testing.T, opts envOptions, fn func(t *testing.T, ctx context.Context, e *env)) {
	t.Helper()
	requireRoot(t)
	opts.nri = true
	for _, flavor := range flavors() {
		t.Run("containerd-"+flavor, func(t *testing.T) {
			if flavor != framework.Flavor2 {
				t.Skipf("SKIPPED: NRI plugins need containerd 1.7 or later; containerd %s has NRI 0.1 only (no plugin socket). Run with TANDEM_E2E_FLAVORS=%s", flavor, framework.Flavor2)
			}
			_, ctx := ktesting.NewTestContext(t)
			fn(t, ctx, newEnv(t, ctx, flavor, opts))
		})
	}
}

// TestNRICPUSetPools is TestCPUSetPools with tandem-nri as the NRI plugin: on this 2-CPU machine an LSE
// container gets a CPU of its own, running LS and BE containers move off it within a second and back when
// it goes, and the plugin's SIGKILL and restart keeps the allocation.
func TestNRICPUSetPools(t *testing.T) {
	forNRI(t, envOptions{}, testCPUSetPools)
}

// TestNRICPUSetSeed000 is TestCPUSetSeed000 with tandem-nri as the NRI plugin: the cpusets of
// Koordinator's documented QoS example on its 16-CPU machine (a fake sysfs tree).
func TestNRICPUSetSeed000(t *testing.T) {
	forNRI(t, envOptions{proxyArgs: machine16Args(t)}, testSeed000)
}

// TestNRIBuiltinPolicies is TestBuiltinPolicies with tandem-nri as the NRI plugin: a BE pod's batch
// cgroup settings and cpu.idle, and an LSE pod with a fraction of a CPU refused at CreateContainer
// with nothing left behind.
func TestNRIBuiltinPolicies(t *testing.T) {
	forNRI(t, envOptions{}, testBuiltinPolicies)
}

// TestNRIPluginKillRecovery is TestKillRecoveryPools with tandem-nri as the NRI plugin: SIGKILLed
// while 20 pods run and started again, it rebuilds its store and allocations from what containerd
// reports when it synchronizes the plugin.
func TestNRIPluginKillRecovery(t *testing.T) {
	forNRI(t, envOptions{}, testKillRecoveryPools)
}

// TestNRIRemovedWhilePluginDown: under NRI, kubelet removes pods without the plugin while it is down
// (containerd goes on alone). An LSE pod removed then must not keep its CPU once the plugin is back:
// Synchronize no longer lists it, so its allocation is released, running LS containers widen again,
// and a new LSE pod gets the CPU.
func TestNRIRemovedWhilePluginDown(t *testing.T) {
	forNRI(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		empty := poolsOf(t, ctx, e)
		_, ls, err := classPod(t, ctx, e, e.viaProxy, "nri-ls", "LS", 0)
		if err != nil {
			t.Fatal(err)
		}
		lsePod, lse, err := classPod(t, ctx, e, e.viaProxy, "nri-lse", "LSE", 1000)
		if err != nil {
			t.Fatal(err)
		}
		exclusive := cpusetOf(t, ctx, e, lse)
		waitCPUSet(t, ctx, e, ls, map[string]string{"0": "1", "1": "0"}[exclusive], time.Second)

		if err := e.proxy.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := framework.RemovePod(ctx, e.viaProxy, lsePod); err != nil {
			t.Fatalf("remove the LSE pod while the plugin is down: %v", err)
		}
		if err := e.proxy.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		waitCPUSet(t, ctx, e, ls, "0-1", time.Second)
		wantPools(t, ctx, e, empty)
		_, lse2, err := classPod(t, ctx, e, e.viaProxy, "nri-lse2", "LSE", 1000)
		if err != nil {
			t.Fatalf("LSE pod after the first one went while the plugin was down: %v, want its CPU", err)
		}
		if got := cpusetOf(t, ctx, e, lse2); got != "0" && got != "1" {
			t.Errorf("new LSE container: cpuset %s, want one CPU", got)
		}
	})
}

// TestNRIContainerdRestart: containerd stops (SIGTERM, then SIGKILL) under the running plugin. The
// plugin reports itself not ready while containerd is gone, connects again by itself when containerd
// is back (same process, /readyz 200), keeps its allocations, and new pods get their policies.
func TestNRIContainerdRestart(t *testing.T) {
	forNRI(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		_, lse, err := classPod(t, ctx, e, e.viaProxy, "nri-lse", "LSE", 1000)
		if err != nil {
			t.Fatal(err)
		}
		exclusive := cpusetOf(t, ctx, e, lse)
		other := map[string]string{"0": "1", "1": "0"}[exclusive]
		if other == "" {
			t.Fatalf("LSE container cpuset %s, want one CPU", exclusive)
		}
		before := poolsOf(t, ctx, e)
		pluginPID := e.proxy.PID()

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
				// Not registered with a runtime, the plugin is not ready: kubelet's pods get no policy.
				waitReadyz(t, ctx, e, http.StatusServiceUnavailable, 10*time.Second)
				if err := e.containerd.StartDaemon(ctx); err != nil {
					t.Fatalf("start containerd again: %v", err)
				}
				waitReadyz(t, ctx, e, http.StatusOK, 30*time.Second)
				if got := e.proxy.PID(); got != pluginPID {
					t.Fatalf("tandem-proxy pid = %d, want %d: the plugin must outlive a runtime restart and connect again", got, pluginPID)
				}
				if after := poolsOf(t, ctx, e); !reflect.DeepEqual(after, before) {
					t.Errorf("/debug/pools after the containerd restart = %+v, want %+v as before", after, before)
				}
				if got := cpusetOf(t, ctx, e, lse); got != exclusive {
					t.Errorf("LSE container after the containerd restart: cpuset %s, want %s", got, exclusive)
				}

				// New pods get their policies: LS off the LSE CPU, BE idle with its batch limits, a
				// second LSE refused for want of a free CPU.
				_, ls, err := classPod(t, ctx, e, e.viaProxy, "nri-ls-"+strings.ToLower(tc.name), "LS", 0)
				if err != nil {
					t.Fatal(err)
				}
				if got := cpusetOf(t, ctx, e, ls); got != other {
					t.Errorf("new LS container: cpuset %s, want %s (all but the LSE CPU)", got, other)
				}
				parent, be := runBEPod(t, ctx, e, "nri-be-"+strings.ToLower(tc.name))
				if got := readCgroup(t, "cpu", parent, "cpu.idle"); got != "1" {
					t.Errorf("new BE pod: %s cpu.idle = %s, want 1", parent, got)
				}
				if got := readCgroup(t, "cpu", parent+"/"+be, "cpu.cfs_quota_us"); got != "150000" {
					t.Errorf("new BE container: cpu.cfs_quota_us = %s, want 150000", got)
				}
				_, _, err = classPod(t, ctx, e, e.viaProxy, "nri-lse-"+strings.ToLower(tc.name), "LSE", 1000)
				if status.Code(err) != codes.ResourceExhausted {
					t.Errorf("second LSE container after the containerd restart: %v, want ResourceExhausted", err)
				}
			})
		}
	})
}

// waitReadyz polls the plugin's /readyz until it answers want.
func waitReadyz(t *testing.T, ctx context.Context, e *env, want int, within time.Duration) {
	t.Helper()
	start := time.Now()
	var got int
	var err error
	for time.Since(start) < within {
		if got, _, err = e.proxy.Get(ctx, "/readyz"); err == nil && got == want {
			t.Logf("/readyz answered %d after %s", want, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("/readyz answers %d (err %v), want %d within %s", got, err, want, within)
}
