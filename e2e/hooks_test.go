//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote"
)

// The example hook server's name, as its registration gives it, and the pod annotations it reads.
const (
	exampleHookName        = "tandem-hook-example"
	exampleCPUShares       = "example.tandem.io/cpu-shares"
	exampleCPUSet          = "example.tandem.io/cpuset"
	hookMetricIgnoredTotal = "tandem_hook_ignored_failures_total"
)

// hookExampleBinary builds cmd/tandem-hook-example once per test run, beside tandem-proxy.
var hookExampleBinary = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := framework.RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(binDir(), "tandem-hook-example")
	cmd := exec.CommandContext(ctx, framework.GoBinary(), "build", "-o", bin, "./cmd/tandem-hook-example")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build tandem-hook-example: %w: %s", err, out)
	}
	return bin, nil
})

// hookServer is a running tandem-hook-example process.
type hookServer struct {
	bin, socket, logPath string
	cmd                  *exec.Cmd
	done                 chan struct{}
}

// start runs the server on its socket and waits until it accepts connections. It does not register
// itself: the test writes the hooks.d file, to choose the failure policy.
func (h *hookServer) start(t *testing.T, ctx context.Context) {
	t.Helper()
	log, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(h.bin, "--listen", h.socket, "-v", "2")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		t.Fatalf("start %s: %v", h.bin, err)
	}
	h.cmd, h.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		_ = log.Close()
		close(done)
	}(h.done)
	// A socket left by a killed server refuses connections, so only a dial proves this one listens.
	poll(t, ctx, "tandem-hook-example to listen on "+h.socket, 10*time.Second, func() (bool, string) {
		select {
		case <-h.done:
			b, _ := os.ReadFile(h.logPath)
			t.Fatalf("tandem-hook-example exited during start: %s", b)
		default:
		}
		c, err := net.DialTimeout("unix", h.socket, time.Second)
		if err != nil {
			return false, err.Error()
		}
		_ = c.Close()
		return true, ""
	})
}

// kill ends the server with SIGKILL, as a crash would: it cannot unregister or close its socket.
func (h *hookServer) kill(t *testing.T) {
	t.Helper()
	if h.cmd == nil {
		return
	}
	select {
	case <-h.done:
		return
	default:
	}
	if err := h.cmd.Process.Kill(); err != nil {
		t.Errorf("kill tandem-hook-example: %v", err)
	}
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Errorf("tandem-hook-example (pid %d) still runs 10s after SIGKILL", h.cmd.Process.Pid)
	}
}

// writeHookFile registers the example server in dir in Tandem's format, replacing the file atomically
// as a configuration tool would, so the proxy never reads half a file.
func writeHookFile(t *testing.T, dir, socket string, policy hooks.FailurePolicy) {
	t.Helper()
	order := 5000
	cfg := remote.FileConfig{
		Name:          exampleHookName,
		Endpoint:      "unix://" + socket,
		Stages:        []string{"PreCreateContainer", "PreUpdateContainerResources"},
		FailurePolicy: string(policy),
		Timeout:       "1s",
		Order:         &order,
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".example.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "example.json")); err != nil {
		t.Fatal(err)
	}
}

// poll calls cond every 100ms until it returns true, failing the test after timeout with the last reason.
func poll(t *testing.T, ctx context.Context, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %v waiting for %s (last: %s)", timeout, what, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// hookPods creates pods through a runtime service and removes them through the direct connection
// when the test ends, so that clean-up works whatever state the proxy or the hook server is in.
type hookPods struct {
	e *env
}

// sandbox runs a host-network sandbox with the given labels and annotations through the proxy.
func (p hookPods) sandbox(t *testing.T, ctx context.Context, name string, labels, annotations map[string]string) (string, *runtimeapi.PodSandboxConfig) {
	t.Helper()
	cfg := framework.PodSandboxConfig(name, "e2e", true)
	for k, v := range labels {
		cfg.Labels[k] = v
	}
	for k, v := range annotations {
		cfg.Annotations[k] = v
	}
	id, err := p.e.viaProxy.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("run pod %s through tandem-proxy: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := framework.RemovePod(ctx, p.e.direct, id); err != nil {
			t.Errorf("clean up pod %s: %v", name, err)
		}
	})
	return id, cfg
}

// create creates container c0 in a sandbox through the proxy.
func (p hookPods) create(ctx context.Context, podID string, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	return p.e.viaProxy.CreateContainer(ctx, podID, framework.ContainerConfig("c0", framework.SleepCommand()...), cfg)
}

// run runs a pod with one started container through the proxy and returns the container's pid.
func (p hookPods) run(t *testing.T, ctx context.Context, name string, labels, annotations map[string]string) int64 {
	t.Helper()
	podID, cfg := p.sandbox(t, ctx, name, labels, annotations)
	id, err := p.create(ctx, podID, cfg)
	if err != nil {
		t.Fatalf("create container in pod %s through tandem-proxy: %v", name, err)
	}
	return p.start(t, ctx, id)
}

func (p hookPods) start(t *testing.T, ctx context.Context, id string) int64 {
	t.Helper()
	if err := p.e.viaProxy.StartContainer(ctx, id); err != nil {
		t.Fatalf("start container %s through tandem-proxy: %v", id, err)
	}
	return containerPID(t, ctx, p.e.direct, id)
}

// remove removes a container through the proxy, so that its store stays in step.
func (p hookPods) remove(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	if err := p.e.viaProxy.RemoveContainer(ctx, id); err != nil {
		t.Fatalf("remove container %s: %v", id, err)
	}
}

// hookMetric sums a hook metric's samples for one hook from the proxy's /metrics text.
func hookMetric(text, name, hook string) float64 {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, `hook="`+hook+`"`) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// TestHooksRemoteServer runs the example hook server against the tandem-proxy binary in front of real
// containerd: it is registered by a hooks.d file the running proxy picks up, changes the CPU shares and
// cpuset of annotated pods as the host's cgroup files show, leaves other pods and pods that skip hook
// servers alone, and when it crashes the failure policy decides: Ignore lets pods start unmodified,
// Fail refuses the container with Unavailable and creates nothing. When it comes back, pods get its
// settings again without a proxy restart.
func TestHooksRemoteServer(t *testing.T) {
	requireRoot(t)
	exampleBin, err := hookExampleBinary()
	if err != nil {
		t.Fatalf("tandem-hook-example does not build: %v", err)
	}
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		start := time.Now()
		hooksDir := filepath.Join(e.dir, "hooks.d")
		if err := os.Mkdir(hooksDir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The env's proxy reads the default hooks.d; this one reads the test's directory. It takes the
		// same socket, state and log, so the env's teardown stops it and keeps its log on failure.
		// It runs no built-in policy: the cpuset policy sets every container's cpuset, so a hook server
		// setting one too is a conflict by design (and dropped under Ignore); this test is about the
		// hook server path alone.
		if _, err := e.proxy.Stop(ctx); err != nil {
			t.Fatalf("stop the env's tandem-proxy: %v", err)
		}
		proxyBin, err := proxyBinary()
		if err != nil {
			t.Fatal(err)
		}
		e.proxy, err = framework.StartProxy(ctx, framework.ProxyOptions{
			Binary: proxyBin, RuntimeEndpoint: e.containerd.Endpoint, Dir: filepath.Join(e.dir, "proxy"),
			ExtraArgs: []string{"--hooks-dir=" + hooksDir, "--policies="},
		})
		if err != nil {
			t.Fatalf("start tandem-proxy with --hooks-dir: %v", err)
		}
		if e.viaProxy, _, err = framework.NewCRIClients(ctx, e.proxy.Endpoint); err != nil {
			t.Fatal(err)
		}
		proxyPID := e.proxy.PID()

		srv := &hookServer{bin: exampleBin, socket: filepath.Join(e.dir, "hook.sock"), logPath: filepath.Join(e.dir, "hook-example.log")}
		t.Cleanup(func() {
			srv.kill(t)
			if t.Failed() {
				if b, err := os.ReadFile(srv.logPath); err == nil {
					t.Logf("tandem-hook-example log:\n%s", b)
				}
			}
		})
		srv.start(t, ctx)
		pods := hookPods{e: e}
		annotated := map[string]string{exampleCPUShares: "512", exampleCPUSet: "0"}

		// The proxy is running; the registration arrives afterwards, as when a hook server is deployed
		// to a node. The watcher's reload is waited for by what users see: a pod getting the settings.
		writeHookFile(t, hooksDir, srv.socket, hooks.Ignore)
		podID, podCfg := pods.sandbox(t, ctx, "tuned", nil, annotated)
		var tunedPID int64
		poll(t, ctx, "the hooks.d file to be in force", 10*time.Second, func() (bool, string) {
			id, err := pods.create(ctx, podID, podCfg)
			if err != nil {
				t.Fatalf("create container through tandem-proxy: %v", err)
			}
			pid := pods.start(t, ctx, id)
			if got := hostCgroupFile(t, pid, "cpu", "cpu.shares"); got != "512" {
				pods.remove(t, ctx, id)
				return false, "cpu.shares " + got
			}
			tunedPID = pid
			return true, ""
		})
		if got := hostCgroupFile(t, tunedPID, "cpuset", "cpuset.cpus"); got != "0" {
			t.Errorf("annotated pod: cpuset.cpus = %q, want the hook server's 0", got)
		}

		plainPID := pods.run(t, ctx, "plain", nil, nil)
		if got := hostCgroupFile(t, plainPID, "cpu", "cpu.shares"); got != "2" {
			t.Errorf("pod without annotations: cpu.shares = %s, want kubelet's 2", got)
		}
		plainCPUs := hostCgroupFile(t, plainPID, "cpuset", "cpuset.cpus")
		skipPID := pods.run(t, ctx, "skipper", map[string]string{hooks.LabelSkipHooks: "true"}, annotated)
		if got := hostCgroupFile(t, skipPID, "cpu", "cpu.shares"); got != "2" {
			t.Errorf("pod labelled %s: cpu.shares = %s, want kubelet's 2 (hook servers skipped)", hooks.LabelSkipHooks, got)
		}
		if got := hostCgroupFile(t, skipPID, "cpuset", "cpuset.cpus"); got != plainCPUs {
			t.Errorf("pod labelled %s: cpuset.cpus = %q, want the default %q (hook servers skipped)", hooks.LabelSkipHooks, got, plainCPUs)
		}

		// A crash under Ignore: pods start as kubelet asked, and the proxy counts what it ignored.
		srv.kill(t)
		ignoredPID := pods.run(t, ctx, "ignored", nil, annotated)
		if got := hostCgroupFile(t, ignoredPID, "cpu", "cpu.shares"); got != "2" {
			t.Errorf("pod started while the hook server was down (Ignore): cpu.shares = %s, want kubelet's 2", got)
		}
		metrics, err := e.proxy.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := hookMetric(metrics, hookMetricIgnoredTotal, exampleHookName); got <= 0 {
			t.Errorf("%s{hook=%q} = %v, want > 0 after a failure under Ignore", hookMetricIgnoredTotal, exampleHookName, got)
		}

		// The same crash under Fail: the container is refused with a status naming the hook, and
		// nothing is created. Until the reload, calls still succeed under Ignore; those are removed.
		writeHookFile(t, hooksDir, srv.socket, hooks.Fail)
		refusedID, refusedCfg := pods.sandbox(t, ctx, "refused", nil, annotated)
		var refusal error
		poll(t, ctx, "the Fail policy to be in force", 10*time.Second, func() (bool, string) {
			id, err := pods.create(ctx, refusedID, refusedCfg)
			if err == nil {
				pods.remove(t, ctx, id)
				return false, "container created under the old policy"
			}
			refusal = err
			return true, ""
		})
		if st, _ := status.FromError(refusal); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), exampleHookName) {
			t.Errorf("CreateContainer with the Fail hook server down: %v; want code Unavailable and a message naming %s", refusal, exampleHookName)
		} else {
			t.Logf("kubelet would see: %s: %s", st.Code(), st.Message())
		}
		left, err := e.direct.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: refusedID})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) != 0 {
			t.Errorf("containerd has %d containers in the refused pod, want none", len(left))
		}
		// A hook server deployed as a pod carries the skip label: it must start while its own server is
		// down (run fails the test if it does not), or it would never come back.
		pods.run(t, ctx, "hookserver-pod", map[string]string{hooks.LabelSkipHooks: "true"}, annotated)

		// The server comes back on the same socket; the proxy reconnects by itself.
		srv.start(t, ctx)
		var backPID int64
		poll(t, ctx, "the proxy to reach the restarted hook server", 10*time.Second, func() (bool, string) {
			id, err := pods.create(ctx, refusedID, refusedCfg)
			if err != nil {
				return false, err.Error()
			}
			backPID = pods.start(t, ctx, id)
			return true, ""
		})
		nextPID := pods.run(t, ctx, "next", nil, annotated)
		for name, pid := range map[string]int64{"the refused pod": backPID, "the next pod": nextPID} {
			if got := hostCgroupFile(t, pid, "cpu", "cpu.shares"); got != "512" {
				t.Errorf("%s, after the hook server came back: cpu.shares = %s, want 512", name, got)
			}
			if got := hostCgroupFile(t, pid, "cpuset", "cpuset.cpus"); got != "0" {
				t.Errorf("%s, after the hook server came back: cpuset.cpus = %q, want 0", name, got)
			}
		}
		if got := e.proxy.PID(); got != proxyPID {
			t.Errorf("tandem-proxy pid %d, want %d: it must not have restarted", got, proxyPID)
		}
		t.Logf("hook scenario on containerd %s took %s", e.flavor, time.Since(start).Round(time.Millisecond))
	})
}
