// Command demo shows tandem-proxy at work on one machine: it installs
// containerd and runc if missing, starts a private containerd, puts
// tandem-proxy in front of it, runs a sample pod through the proxy with
// k8s.io/cri-client (the client kubelet uses), prints a checklist of what
// passed, and tears everything down again.
//
//	go run ./e2e/demo [--flavor 1.6|2] [--keep]
//	go run ./e2e/demo --stop DIR   # tear down what --keep left running
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/framework"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

// state is what --keep leaves in DIR/demo.json for --stop.
type state struct {
	Flavor string `json:"flavor"`
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	flavor := fs.String("flavor", framework.Flavor16, `containerd to run: "1.6" (Debian's) or "2" (v2.4.2, built once into the cache)`)
	keep := fs.Bool("keep", false, "leave containerd, tandem-proxy and the sample pod running, and print how to reach and stop them")
	stopDir := fs.String("stop", "", "tear down a demo that --keep left running in this directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the demo runs containerd and runc and needs root: run it as root (go run ./e2e/demo, or make demo)")
	}
	// cri-client logs every failed call; the checklist reports them instead.
	ctx = klog.NewContext(ctx, logr.Discard())
	if *stopDir != "" {
		return stopKept(ctx, *stopDir, out)
	}
	if *flavor != framework.Flavor16 && *flavor != framework.Flavor2 {
		return fmt.Errorf("unknown --flavor %q: use 1.6 or 2", *flavor)
	}
	d := &demo{out: out, flavor: *flavor, keep: *keep, start: time.Now()}
	err := d.run(ctx)
	if !d.keep || err != nil || d.failed > 0 {
		d.teardown(context.WithoutCancel(ctx))
	}
	d.summary()
	if err != nil {
		return err
	}
	if d.failed > 0 {
		return fmt.Errorf("%d of %d checks failed", d.failed, d.passed+d.failed)
	}
	return nil
}

type demo struct {
	out    io.Writer
	flavor string
	keep   bool
	start  time.Time

	dir        string
	containerd *framework.Containerd
	proxy      *framework.Proxy
	rs         internalapi.RuntimeService
	is         internalapi.ImageManagerService
	direct     internalapi.RuntimeService
	runtime    string // "containerd 1.6.20"

	passed, failed int
}

// check runs one step and prints ✔ or ✘ with the step's short facts.
func (d *demo) check(name string, fn func() (string, error)) bool {
	facts, err := fn()
	if err != nil {
		d.failed++
		fmt.Fprintf(d.out, "  ✘ %s: %v\n", name, err)
		return false
	}
	d.passed++
	if facts != "" {
		name += " — " + facts
	}
	fmt.Fprintf(d.out, "  ✔ %s\n", name)
	return true
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func (d *demo) run(ctx context.Context) error {
	fmt.Fprintf(d.out, "Tandem demo: tandem-proxy in front of a private containerd %s\n\n", d.flavor)
	ok := d.check("containerd, runc, busybox-static, CNI plugins installed", func() (string, error) {
		return "", framework.EnsureDebianPackages(ctx)
	})
	ok = ok && d.check("containerd binaries", func() (string, error) {
		if d.flavor == framework.Flavor2 && !framework.ContainerdV2Cached() {
			fmt.Fprintf(d.out, "    (containerd %s: the first run builds it, which takes a few minutes)\n", framework.ContainerdV2Version)
		}
		bin, err := framework.EnsureContainerd(ctx, d.flavor)
		return bin, err
	})
	var err error
	d.dir, err = os.MkdirTemp("", "tandem-demo-")
	if err != nil {
		return err
	}
	var proxyBin string
	ok = ok && d.check("tandem-proxy built", func() (string, error) {
		proxyBin, err = framework.BuildProxy(ctx, filepath.Join(d.dir, "bin"))
		return proxyBin, err
	})
	ok = ok && d.check("containerd started", func() (string, error) {
		d.containerd, err = framework.StartContainerd(ctx, framework.ContainerdOptions{
			Flavor: d.flavor, Dir: filepath.Join(d.dir, "ctrd"), CNI: cniInstalled(),
		})
		if err != nil {
			return "", err
		}
		d.direct, _, err = framework.NewCRIClients(ctx, d.containerd.Endpoint)
		if err != nil {
			return "", err
		}
		v, err := d.direct.Version(ctx, "v1")
		if err != nil {
			return "", err
		}
		d.runtime = v.GetRuntimeName() + " " + v.GetRuntimeVersion()
		return fmt.Sprintf("%s, pid %d, %s", d.runtime, d.containerd.PID(), d.containerd.Endpoint), nil
	})
	ok = ok && d.check("tandem-proxy ready", func() (string, error) {
		d.proxy, err = framework.StartProxy(ctx, framework.ProxyOptions{
			Binary: proxyBin, RuntimeEndpoint: d.containerd.Endpoint, Dir: filepath.Join(d.dir, "proxy"),
		})
		if err != nil {
			return "", err
		}
		d.rs, d.is, err = framework.NewCRIClients(ctx, d.proxy.Endpoint)
		return fmt.Sprintf("pid %d, %s", d.proxy.PID(), d.proxy.Endpoint), err
	})
	if !ok {
		return nil
	}
	if d.keep {
		if err := os.WriteFile(filepath.Join(d.dir, "demo.json"), fmt.Appendf(nil, `{"flavor":%q}`, d.flavor), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(d.out, "\nThrough tandem-proxy, with k8s.io/cri-client:\n")
	d.pod(ctx)
	d.seed000(ctx)
	if d.keep && d.failed == 0 {
		d.printKept()
	}
	return nil
}

// pod drives the sample pod's lifecycle through the proxy.
func (d *demo) pod(ctx context.Context) {
	d.check("Version", func() (string, error) {
		v, err := d.rs.Version(ctx, "v1")
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %s, CRI %s", v.GetRuntimeName(), v.GetRuntimeVersion(), v.GetRuntimeApiVersion()), nil
	})
	d.check("ImageStatus", func() (string, error) {
		st, err := d.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: framework.TestImage}, false)
		if err != nil {
			return "", err
		}
		if st.GetImage() == nil {
			return "", fmt.Errorf("image %s is missing", framework.TestImage)
		}
		return fmt.Sprintf("%s, %d KiB", framework.TestImage, st.GetImage().GetSize()/1024), nil
	})

	events := d.watchEvents(ctx)
	defer events.stop()

	hostNetwork := !cniInstalled()
	cfg := framework.PodSandboxConfig("demo", "default", hostNetwork)
	var podID, ctrID string
	ok := d.check("RunPodSandbox", func() (string, error) {
		var err error
		podID, err = d.rs.RunPodSandbox(ctx, cfg, "")
		if err != nil {
			return "", err
		}
		st, err := d.rs.PodSandboxStatus(ctx, podID, false)
		if err != nil {
			return "", err
		}
		ip := st.GetStatus().GetNetwork().GetIp()
		if hostNetwork {
			ip = "host network"
		}
		return fmt.Sprintf("pod default/demo %s, %s, %s", short(podID), st.GetStatus().GetState(), ip), nil
	})
	ok = ok && d.check("CreateContainer + StartContainer", func() (string, error) {
		var err error
		ctrID, err = d.rs.CreateContainer(ctx, podID, framework.ContainerConfig("app", framework.SleepCommand()...), cfg)
		if err != nil {
			return "", err
		}
		return "container app " + short(ctrID), d.rs.StartContainer(ctx, ctrID)
	})
	ok = ok && d.check("ExecSync", func() (string, error) {
		stdout, stderr, err := d.rs.ExecSync(ctx, ctrID, []string{"echo", "hello from tandem"}, 10*time.Second)
		if err != nil {
			return "", fmt.Errorf("%w (stderr %q)", err, stderr)
		}
		if string(stdout) != "hello from tandem\n" {
			return "", fmt.Errorf("stdout %q, want %q", stdout, "hello from tandem\n")
		}
		return fmt.Sprintf("echo hello from tandem → %q", strings.TrimSpace(string(stdout))), nil
	})
	ok = ok && d.check("ContainerStatus", func() (string, error) {
		st, err := d.rs.ContainerStatus(ctx, ctrID, false)
		if err != nil {
			return "", err
		}
		if s := st.GetStatus().GetState(); s != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return "", fmt.Errorf("state %v, want CONTAINER_RUNNING", s)
		}
		return fmt.Sprintf("%s since %s", st.GetStatus().GetState(), time.Unix(0, st.GetStatus().GetStartedAt()).Format(time.TimeOnly)), nil
	})
	ok = ok && d.check("ListPodSandbox + ListContainers equal the runtime's own answers", func() (string, error) {
		pods, err := d.rs.ListPodSandbox(ctx, nil)
		if err != nil {
			return "", err
		}
		directPods, err := d.direct.ListPodSandbox(ctx, nil)
		if err != nil {
			return "", err
		}
		ctrs, err := d.rs.ListContainers(ctx, nil)
		if err != nil {
			return "", err
		}
		directCtrs, err := d.direct.ListContainers(ctx, nil)
		if err != nil {
			return "", err
		}
		if !equalLists(pods, directPods) || !equalLists(ctrs, directCtrs) {
			return "", errors.New("the lists through the proxy differ from the runtime's")
		}
		return fmt.Sprintf("%d pod, %d container", len(pods), len(ctrs)), nil
	})
	ok = ok && d.check("proxy store (/debug/store)", func() (string, error) {
		s, err := d.proxy.Store(ctx)
		if err != nil {
			return "", err
		}
		for _, p := range s.Pods {
			if p.ID == podID {
				for _, c := range s.Containers {
					if c.ID == ctrID {
						return fmt.Sprintf("%d pod (%s), %d container (%s)", len(s.Pods), p.State, len(s.Containers), c.State), nil
					}
				}
			}
		}
		return "", fmt.Errorf("the store lacks the demo pod or container: %d pods, %d containers", len(s.Pods), len(s.Containers))
	})
	if !ok || d.keep {
		d.metrics(ctx)
		return
	}
	d.check("StopContainer + RemoveContainer", func() (string, error) {
		if err := d.rs.StopContainer(ctx, ctrID, 10); err != nil {
			return "", err
		}
		st, err := d.rs.ContainerStatus(ctx, ctrID, false)
		if err != nil {
			return "", err
		}
		code := st.GetStatus().GetExitCode()
		if err := d.rs.RemoveContainer(ctx, ctrID); err != nil {
			return "", err
		}
		return fmt.Sprintf("exited with code %d, removed", code), nil
	})
	d.check("StopPodSandbox + RemovePodSandbox", func() (string, error) {
		if err := framework.RemovePod(ctx, d.rs, podID); err != nil {
			return "", err
		}
		pods, err := d.rs.ListPodSandbox(ctx, nil)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d pods left", len(pods)), nil
	})
	events.report(ctx, d, ctrID)
	d.metrics(ctx)
}

func (d *demo) metrics(ctx context.Context) {
	d.check("/metrics counts the calls", func() (string, error) {
		text, err := d.proxy.Metrics(ctx)
		if err != nil {
			return "", err
		}
		var total int
		methods := map[string]bool{}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "tandem_proxy_requests_total{") {
				total++
				if i := strings.Index(line, `method="`); i >= 0 {
					methods[strings.SplitN(line[i+8:], `"`, 2)[0]] = true
				}
			}
		}
		if total == 0 {
			return "", errors.New("no tandem_proxy_requests_total samples")
		}
		return fmt.Sprintf("tandem_proxy_requests_total for %d methods", len(methods)), nil
	})
}

func equalLists[T proto.Message](a, b []T) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x T) bool {
		return !slices.ContainsFunc(b, func(y T) bool { return proto.Equal(x, y) })
	})
}

// events follows GetContainerEvents through the proxy, as kubelet's evented
// PLEG does.
type events struct {
	mu     sync.Mutex
	got    []*runtimeapi.ContainerEventResponse
	err    error
	cancel context.CancelFunc
	done   chan struct{}
}

func (d *demo) watchEvents(ctx context.Context) *events {
	ctx, cancel := context.WithCancel(ctx)
	e := &events{cancel: cancel, done: make(chan struct{})}
	ch := make(chan *runtimeapi.ContainerEventResponse, 64)
	go func() {
		defer close(e.done)
		err := d.rs.GetContainerEvents(ctx, ch, nil)
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
	}()
	go func() {
		for {
			select {
			case ev := <-ch:
				e.mu.Lock()
				e.got = append(e.got, ev)
				e.mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()
	return e
}

func (e *events) stop() { e.cancel() }

func (e *events) report(ctx context.Context, d *demo, ctrID string) {
	d.check("GetContainerEvents", func() (string, error) {
		want := []runtimeapi.ContainerEventType{
			runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT,
			runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
			runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT,
			runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			e.mu.Lock()
			var got []string
			n := 0
			for _, ev := range e.got {
				if ev.GetContainerId() == ctrID {
					got = append(got, strings.TrimSuffix(strings.TrimPrefix(ev.GetContainerEventType().String(), "CONTAINER_"), "_EVENT"))
					if n < len(want) && ev.GetContainerEventType() == want[n] {
						n++
					}
				}
			}
			streamErr := e.err
			e.mu.Unlock()
			if n == len(want) {
				return "container app: " + strings.Join(got, " → "), nil
			}
			if streamErr != nil {
				if st := status.Convert(streamErr); st.Code() == codes.Unimplemented {
					// An older runtime lacks the RPC: the proxy must hand back its answer as is.
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					direct := status.Convert(d.direct.GetContainerEvents(cctx, make(chan *runtimeapi.ContainerEventResponse, 1), nil))
					cancel()
					if direct.Code() != st.Code() || direct.Message() != st.Message() {
						return "", fmt.Errorf("through the proxy %v %q, direct %v %q", st.Code(), st.Message(), direct.Code(), direct.Message())
					}
					return fmt.Sprintf("%s lacks it; its Unimplemented came through unchanged", d.runtime), nil
				}
				return "", fmt.Errorf("stream ended: %w", streamErr)
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return "", fmt.Errorf("got %v for the container, want CREATED → STARTED → STOPPED → DELETED", got)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func (d *demo) printKept() {
	fmt.Fprintf(d.out, "\nLeft running (--keep):\n")
	fmt.Fprintf(d.out, "  tandem-proxy  %s  (pid %d, log %s)\n", d.proxy.Endpoint, d.proxy.PID(), d.proxy.LogPath)
	fmt.Fprintf(d.out, "  HTTP          http://%s/metrics  /healthz  /readyz\n", d.proxy.MetricsAddr)
	fmt.Fprintf(d.out, "  debug (root)  %s  /debug/store  /debug/pools\n", d.proxy.DebugSocket)
	fmt.Fprintf(d.out, "  containerd    %s  (pid %d, log %s)\n", d.containerd.Endpoint, d.containerd.PID(), d.containerd.LogPath)
	fmt.Fprintf(d.out, "  try           curl -s --unix-socket %s http://localhost/debug/store\n", d.proxy.DebugSocket)
	fmt.Fprintf(d.out, "                crictl --runtime-endpoint %s pods   (if crictl is installed)\n", d.proxy.Endpoint)
	fmt.Fprintf(d.out, "  stop it with  go run ./e2e/demo --stop %s\n", d.dir)
}

// teardown stops the proxy (expecting exit 0 on SIGTERM) and containerd
// (which removes the pods), and removes the demo's directory.
func (d *demo) teardown(ctx context.Context) {
	if d.dir == "" {
		return
	}
	fmt.Fprintf(d.out, "\nTeardown:\n")
	if d.proxy != nil {
		d.check("tandem-proxy stopped with SIGTERM", func() (string, error) {
			code, err := d.proxy.Stop(ctx)
			if err != nil {
				return "", err
			}
			if code != 0 {
				return "", fmt.Errorf("exit code %d, want 0", code)
			}
			return "exit code 0", nil
		})
	}
	if d.containerd != nil {
		d.check("containerd stopped, pods, shims and mounts cleaned up", func() (string, error) {
			return "", d.containerd.Stop(ctx)
		})
	}
	if err := os.RemoveAll(d.dir); err != nil {
		fmt.Fprintf(d.out, "  ✘ remove %s: %v\n", d.dir, err)
		d.failed++
	}
}

func (d *demo) summary() {
	total := d.passed + d.failed
	took := time.Since(d.start).Round(100 * time.Millisecond)
	what := d.runtime
	if what == "" {
		what = "containerd " + d.flavor
	}
	if d.failed == 0 {
		fmt.Fprintf(d.out, "\nPASS: all %d checks passed (tandem-proxy in front of %s, %s)\n", total, what, took)
		return
	}
	fmt.Fprintf(d.out, "\nFAIL: %d of %d checks failed (tandem-proxy in front of %s, %s); logs: %s\n", d.failed, total, what, took, d.logsHint())
}

func (d *demo) logsHint() string {
	if d.keep {
		return d.dir
	}
	return "rerun with --keep to keep " + filepath.Join("<dir>", "ctrd", "containerd.log") + " and " + filepath.Join("<dir>", "proxy", "proxy.log")
}

func cniInstalled() bool {
	for _, p := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local"} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// stopKept tears down what a --keep run left in dir.
func stopKept(ctx context.Context, dir string, out io.Writer) error {
	b, err := os.ReadFile(filepath.Join(dir, "demo.json"))
	if err != nil {
		return fmt.Errorf("%s is not a demo left by --keep: %w", dir, err)
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("read %s/demo.json: %w", dir, err)
	}
	var errs []error
	if p, err := framework.AttachProxy(filepath.Join(dir, "proxy")); err == nil {
		if _, err := p.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop tandem-proxy: %w", err))
		} else {
			fmt.Fprintln(out, "  ✔ tandem-proxy stopped")
		}
	}
	c, err := framework.AttachContainerd(ctx, s.Flavor, filepath.Join(dir, "ctrd"))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := c.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop containerd: %w", err))
	} else {
		fmt.Fprintln(out, "  ✔ containerd stopped, pods removed")
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(out, "  ✔ %s removed\n", dir)
	}
	return errors.Join(errs...)
}
