package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// childEnv names the environment variable that makes this binary (or its test binary) one of the
// benchmark's server processes instead of the benchmark; its value is a JSON childSpec. An environment
// variable, not a flag, so that the test binary can be a child too (see TestMain).
const childEnv = "TANDEM_HOOKLATENCY_CHILD"

// childSpec says what a child process serves.
type childSpec struct {
	// Role is runtime, hook, relay or proxies.
	Role string `json:"role"`
	// Sock is where it listens.
	Sock string `json:"sock"`
	// Hook is the hook server's socket: a relay calls it (none answers at once); a proxy of a remote
	// variant registers it.
	Hook string `json:"hook,omitempty"`
	// Runtime is the proxies' runtime socket; Variants name their hooks, one proxy each, with its socket
	// and state directory in Dir, named after the variant.
	Runtime  string   `json:"runtime,omitempty"`
	Variants []string `json:"variants,omitempty"`
	Dir      string   `json:"dir,omitempty"`
}

// childResult is what the proxies' process reports when it stops.
type childResult struct {
	// HookMeanMicros is the mean of its tandem_hook_duration_seconds, for the remote variant.
	HookMeanMicros float64 `json:"hookMeanMicros"`
}

// readyLine is what a child prints on stdout once it serves (and, for the proxies, once their hooks
// were seen acting).
const readyLine = "ready"

// serveChild runs this process as the server spec describes, until ctx is done.
func serveChild(ctx context.Context, specJSON string) error {
	var spec childSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("%s: %w", childEnv, err)
	}
	var stop func()
	var err error
	var hookMetrics *prometheus.Registry
	switch spec.Role {
	case "runtime":
		stop, err = serveUnix(ctx, spec.Sock, func(s *grpc.Server) { runtimeapi.RegisterRuntimeServiceServer(s, newStubRuntime()) })
	case "hook":
		stop, err = serveUnix(ctx, spec.Sock, registerHookServer)
	case "relay":
		stop, err = serveRelay(ctx, spec.Sock, spec.Hook)
	case "proxies":
		hookMetrics = prometheus.NewRegistry()
		stop, err = serveProxies(ctx, spec, hookMetrics)
	default:
		err = fmt.Errorf("unknown role %q", spec.Role)
	}
	if err != nil {
		return err
	}
	fmt.Println(readyLine)
	<-ctx.Done()
	stop()
	if hookMetrics != nil {
		var res childResult
		// Without the remote variant there are no samples: the mean stays 0.
		res.HookMeanMicros, _ = meanHookSeconds(hookMetrics)
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	return nil
}

// serveRelay serves a relay on sock that calls the hook server on hookSock, or answers at once.
func serveRelay(ctx context.Context, sock, hookSock string) (func(), error) {
	r := relay{}
	closeHook := func() {}
	if hookSock != "" {
		api, closeAPI, err := hookClient(hookSock)
		if err != nil {
			return nil, err
		}
		r.hook, closeHook = api, closeAPI
	}
	stop, err := serveUnix(ctx, sock, func(s *grpc.Server) { v1alpha1.RegisterRuntimeHookServiceServer(s, r) })
	if err != nil {
		closeHook()
		return nil, err
	}
	return func() { stop(); closeHook() }, nil
}

// serveProxies starts a proxy per variant, all in this process as tandem-proxy is one process on a
// node, and checks that their hooks act before it says ready. The remote variant's hook metrics go to reg.
func serveProxies(ctx context.Context, spec childSpec, reg prometheus.Registerer) (func(), error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for _, v := range spec.Variants {
		s, ok := findSetup(v)
		if !ok {
			stopAll()
			return nil, fmt.Errorf("unknown variant %q", v)
		}
		var hookReg prometheus.Registerer
		if s.name == "remote-1" {
			hookReg = reg
		}
		d, closeHooks, err := s.dispatcher(ctx, spec.Hook, hookReg)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("%s: build the hooks: %w", s.name, err)
		}
		stops = append(stops, closeHooks)
		t, stopProxy, err := startProxyAt(ctx, proxySock(spec.Dir, s.name), spec.Runtime, filepath.Join(spec.Dir, s.name+"-state"), s.name, d)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		stops = append(stops, stopProxy)
		if err := t.verify(ctx, s.want); err != nil {
			stopAll()
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return stopAll, nil
}

// proxySock is where the variant's proxy listens.
func proxySock(dir, variant string) string { return filepath.Join(dir, variant+".sock") }

// child is a running server process.
type child struct {
	name string
	cmd  *exec.Cmd
	out  *bufio.Reader
	done chan struct{}
}

// startChild starts this binary as the server spec describes and waits until it is ready.
func startChild(ctx context.Context, name string, spec childSpec) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary to start the %s process: %w", name, err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	// A benchmark killed midway must not leave its servers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s process: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, out: bufio.NewReader(stdout), done: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		line, err := c.out.ReadString('\n')
		if err == nil && strings.TrimSpace(line) != readyLine {
			err = fmt.Errorf("unexpected first line %q", line)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = errors.New("not ready within 30s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the %s process did not start (its log is above): %w", name, err)
	}
	return c, nil
}

// stop ends the process and returns what it printed after ready.
func (c *child) stop() (string, error) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	rest := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(c.out); rest <- b }()
	var out []byte
	select {
	case out = <-rest:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		out = <-rest
	}
	if err := c.cmd.Wait(); err != nil {
		return string(out), fmt.Errorf("the %s process: %w", c.name, err)
	}
	return string(out), nil
}

// processes runs the servers in processes of their own, as on a node: the stub runtime (containerd), the
// hook server (koordlet), the proxies (tandem-proxy: one proxy.Server per variant, in one process, so that
// they differ in their hooks only), and each relay. It returns the variants to time, the hook server's
// socket, and a func that stops everything and returns the remote proxy's mean hook time in µs.
func processes(ctx context.Context, dir string) ([]variant, string, func() (float64, error), error) {
	var children []*child
	var closers []func()
	stopAll := func() error {
		for _, c := range closers {
			c()
		}
		closers = nil
		var errs []error
		for i := len(children) - 1; i >= 0; i-- {
			if _, err := children[i].stop(); err != nil {
				errs = append(errs, err)
			}
		}
		children = nil
		return errors.Join(errs...)
	}
	fail := func(err error) ([]variant, string, func() (float64, error), error) {
		if serr := stopAll(); serr != nil {
			klog.FromContext(ctx).Error(serr, "Stopping the benchmark's processes")
		}
		return nil, "", nil, err
	}
	start := func(name string, spec childSpec) (*child, error) {
		c, err := startChild(ctx, name, spec)
		if err == nil {
			children = append(children, c)
		}
		return c, err
	}
	rtSock, hookSock := filepath.Join(dir, "runtime.sock"), filepath.Join(dir, "hook.sock")
	if _, err := start("runtime", childSpec{Role: "runtime", Sock: rtSock}); err != nil {
		return fail(err)
	}
	if _, err := start("hook server", childSpec{Role: "hook", Sock: hookSock}); err != nil {
		return fail(err)
	}
	var names []string
	for _, s := range setups() {
		names = append(names, s.name)
	}
	proxies, err := start("proxies", childSpec{Role: "proxies", Runtime: rtSock, Hook: hookSock, Variants: names, Dir: dir})
	if err != nil {
		return fail(err)
	}
	var variants []variant
	for _, s := range setups() {
		t, closeClient, err := dialProxy(ctx, proxySock(dir, s.name))
		if err != nil {
			return fail(err)
		}
		closers = append(closers, closeClient)
		variants = append(variants, variant{name: s.name, description: s.description, createContainer: true, once: t.once})
	}
	for _, rl := range relays(hookSock) {
		sock := filepath.Join(dir, rl.name+".sock")
		if _, err := start(rl.name, childSpec{Role: "relay", Sock: sock, Hook: rl.hook}); err != nil {
			return fail(err)
		}
		api, closeAPI, err := hookClient(sock)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, closeAPI)
		variants = append(variants, variant{name: rl.name, description: rl.description, once: hookCall(api)})
	}
	finish := func() (float64, error) {
		for _, c := range closers {
			c()
		}
		closers = nil
		var res childResult
		children = slices.DeleteFunc(children, func(c *child) bool { return c == proxies })
		out, err := proxies.stop()
		if err == nil {
			if err = json.Unmarshal([]byte(out), &res); err != nil {
				err = fmt.Errorf("the proxies' report %q: %w", out, err)
			}
		}
		return res.HookMeanMicros, errors.Join(err, stopAll())
	}
	return variants, hookSock, finish, nil
}
