// Command hooklatency measures what hooks add to a CreateContainer call through tandem's proxy: with no
// hooks, one and five in-process hooks, one remote hook server and all built-in policies, all
// interleaved in one run, beside the bare unix-socket gRPC round trip to the same hook server. It checks
// the hook framework's targets: five in-process hooks add at most 20 µs at p50, one remote hook adds at
// most 250 µs at p50, and all built-in policies add at most 1000 µs at p99. What the remote hook adds
// in round trips to its server is printed for context, not judged. It runs twice, with every server in
// a process of its own and with all of them in one process; each target is judged in the layout that
// measures it (the remote hook across processes, the others in one). See the Benchmark section of
// docs/hooks.md.
//
//	go run ./bench/hooklatency [--layout both|processes|one-process] [--iterations N] [--batch B] [--warmup W] [--json out.json]
//
// It exits 1 when a target is missed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/hostinfo"
	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	builtinpolicy "github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/remote"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
	"github.com/tandemkit/tandem/proxy"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/topology"
)

type options struct {
	iterations int
	batch      int
	warmup     int
	jsonPath   string
	stateRoot  string
	// layout is both, processes or one-process.
	layout string
}

// Layouts: every server in a process of its own, as on a node, or all in the benchmark's process.
const (
	layoutBoth       = "both"
	layoutProcesses  = "processes"
	layoutOneProcess = "one-process"
)

// processLayouts lists the layouts to run, as "every server in a process of its own" flags.
func (o options) processLayouts() []bool {
	switch o.layout {
	case layoutProcesses:
		return []bool{true}
	case layoutOneProcess:
		return []bool{false}
	}
	return []bool{true, false}
}

// errMissed is returned when the run worked but a target was missed.
var errMissed = errors.New("a latency target was missed")

func main() {
	var o options
	fs := pflag.NewFlagSet("hooklatency", pflag.ExitOnError)
	fs.IntVar(&o.iterations, "iterations", 20000, "timed calls per variant")
	fs.IntVar(&o.batch, "batch", 50, "calls a variant makes before the next variant takes its turn")
	fs.IntVar(&o.warmup, "warmup", 500, "untimed calls per variant before timing")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file (- for stdout)")
	fs.StringVar(&o.stateRoot, "state-root", "/dev/shm", "tmpfs directory for the proxies' state and sockets: the checkpoint's fsync on a disk would drown the hooks")
	fs.StringVar(&o.layout, "layout", layoutBoth, "processes: the runtime, the hook server, each proxy and each relay in a process of its own, as on a node; one-process: all in this process, sharing one Go runtime; both: one run of each, every target judged in the layout that measures it")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = klog.NewContext(ctx, klog.Background().WithName("hooklatency"))
	var err error
	if spec := os.Getenv(childEnv); spec != "" {
		err = serveChild(ctx, spec)
	} else {
		err = run(ctx, o)
	}
	stop()
	klog.Flush()
	switch {
	case errors.Is(err, errMissed):
		os.Exit(1)
	case err != nil:
		klog.ErrorS(err, "Benchmark failed")
		klog.Flush()
		os.Exit(2)
	}
}

func (o options) validate() error {
	var errs []error
	if o.iterations < 1 || o.batch < 1 {
		errs = append(errs, errors.New("--iterations and --batch must be at least 1"))
	}
	if o.warmup < 0 {
		errs = append(errs, errors.New("--warmup cannot be negative"))
	}
	switch o.layout {
	case layoutBoth, layoutProcesses, layoutOneProcess:
	default:
		errs = append(errs, fmt.Errorf("--layout %q: want %s, %s or %s", o.layout, layoutBoth, layoutProcesses, layoutOneProcess))
	}
	return errors.Join(errs...)
}

// variant is one thing measured: once makes one timed call and returns its latency. Variants that time
// CreateContainer through a proxy get an added latency against the first variant, which has no hooks.
type variant struct {
	name, description string
	createContainer   bool
	once              func(ctx context.Context) (time.Duration, error)
}

// run measures each layout in turn, prints its report, and fails when a target judged in it is missed.
func run(ctx context.Context, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	var reps []*report
	pass := true
	for i, processes := range o.processLayouts() {
		rep, err := runLayout(ctx, o, processes)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Println()
		}
		rep.print(os.Stdout)
		reps = append(reps, rep)
		pass = pass && rep.Pass
	}
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, reps); err != nil {
			return err
		}
	}
	if !pass {
		return errMissed
	}
	return nil
}

// runLayout measures every variant with the servers in processes of their own, or all in this one.
func runLayout(ctx context.Context, o options, separate bool) (*report, error) {
	logger := klog.FromContext(ctx)
	root := o.stateRoot
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		logger.Info("No tmpfs for the proxies' state; using the temp dir, where checkpoint writes may add noise", "stateRoot", root)
		root = os.TempDir()
	}
	dir, err := os.MkdirTemp(root, "tandem-hooklatency-")
	if err != nil {
		return nil, fmt.Errorf("create the run's directory under --state-root %s: %w", root, err)
	}
	defer os.RemoveAll(dir)

	start := inProcess
	if separate {
		start = processes
	}
	variants, hookSock, finish, err := start(ctx, dir)
	if err != nil {
		return nil, err
	}
	finished := false
	defer func() {
		if !finished {
			_, _ = finish()
		}
	}()
	api, closeAPI, err := hookClient(hookSock)
	if err != nil {
		return nil, err
	}
	defer closeAPI()
	// The bare round trip goes after the proxies (variants[0] is the one without hooks) and before the
	// relays, as the report lists them.
	bare := variant{name: "grpc-rtt", description: "bare gRPC round trip to the hook server", once: hookCall(api)}
	variants = slices.Insert(variants, len(setups()), bare)
	// The remote hook through the dispatcher without a proxy around it tells the framework's own cost
	// around the round trip apart from the cost of a nested call inside the proxy.
	conn, err := remote.NewConn("unix://" + hookSock)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	rd, err := remoteDispatcher(ctx, conn, nil)
	if err != nil {
		return nil, err
	}
	variants = append(variants, variant{name: "remote-dispatch", description: "the remote hook via Dispatcher.Run alone", once: dispatchOnce(rd)})
	// Likewise the five in-process hooks: what dispatch itself costs, apart from applying the changes
	// to the request, forwarding the larger request and checkpointing the larger container.
	d5, err := hooks.NewDispatcher(ctx, policies(5), nil)
	if err != nil {
		return nil, err
	}
	variants = append(variants, variant{name: "inproc5-dispatch", description: "5 in-process hooks via Dispatcher.Run alone", once: dispatchOnce(d5)})

	m := readMachine()
	m.Processes = separate
	logger.Info("Measuring", "variants", len(variants), "iterations", o.iterations, "batch", o.batch, "warmup", o.warmup, "processes", separate)
	samples, err := measure(ctx, variants, o)
	if err != nil {
		return nil, err
	}
	m.LoadAfter = hostinfo.LoadAverage()
	rep := newReport(m, o, variants, samples)
	finished = true
	if rep.RemoteHookInProxyMean, err = finish(); err != nil {
		return nil, err
	}
	return rep, nil
}

// setup is one proxy variant: the hooks it runs and what they must have changed in a container.
type setup struct {
	name, description string
	// dispatcher builds the hooks; hookSock is the hook server's socket, for the remote variant. The
	// returned func closes what the hooks opened.
	dispatcher func(ctx context.Context, hookSock string, reg prometheus.Registerer) (*hooks.Dispatcher, func(), error)
	want       func(*hooks.Resources, map[string]string) bool
}

// setups lists the proxy variants; the first has no hooks, and the others' latency is added to it.
func setups() []setup {
	inProcess := func(regs func() []hooks.Registration) func(context.Context, string, prometheus.Registerer) (*hooks.Dispatcher, func(), error) {
		return func(ctx context.Context, _ string, reg prometheus.Registerer) (*hooks.Dispatcher, func(), error) {
			d, err := hooks.NewDispatcher(ctx, regs(), reg)
			return d, func() {}, err
		}
	}
	return []setup{
		{"none", "no hooks", inProcess(func() []hooks.Registration { return nil }),
			func(r *hooks.Resources, _ map[string]string) bool { return r.CPUShares == kubeletShares }},
		{"inproc-1", "1 in-process hook", inProcess(func() []hooks.Registration { return policies(1) }),
			func(r *hooks.Resources, _ map[string]string) bool { return r.CPUShares == 512 }},
		{"inproc-5", "5 in-process hooks", inProcess(func() []hooks.Registration { return policies(5) }),
			func(r *hooks.Resources, ann map[string]string) bool {
				return r.CPUShares == 512 && r.CpusetCpus == "0" && r.CPUQuota == 200000 && r.MemoryLimitInBytes == 1<<30 && ann["tandem.io/qos"] == "LS"
			}},
		{"remote-1", "1 remote hook", func(ctx context.Context, hookSock string, reg prometheus.Registerer) (*hooks.Dispatcher, func(), error) {
			conn, err := remote.NewConn("unix://" + hookSock)
			if err != nil {
				return nil, nil, err
			}
			d, err := remoteDispatcher(ctx, conn, reg)
			return d, func() { _ = conn.Close() }, err
		}, func(r *hooks.Resources, _ map[string]string) bool { return r.CPUShares == 512 }},
		// Tandem's own policies as tandem-proxy runs them by default, on this machine's real topology and
		// cgroups: the benchmark's pod is BE, so qos, cpuset and the OOM score act on it.
		{"builtin", "all built-in policies", func(ctx context.Context, _ string, _ prometheus.Registerer) (*hooks.Dispatcher, func(), error) {
			d, err := builtinDispatcher(ctx)
			return d, func() {}, err
		}, func(r *hooks.Resources, ann map[string]string) bool {
			return ann["tandem.io/qos-class"] == "BE" && r.CpusetCpus != "" && r.OomScoreAdj == 1000
		}},
	}
}

func findSetup(name string) (setup, bool) {
	for _, s := range setups() {
		if s.name == name {
			return s, true
		}
	}
	return setup{}, false
}

// relaySpec is a relay to time: hook is the hook server it calls, or "" to answer at once.
type relaySpec struct{ name, description, hook string }

// relays are not targets: the same round trip made by a gRPC server's handler while its own caller
// waits, as any gRPC proxy makes it, less the same relay answering at once.
func relays(hookSock string) []relaySpec {
	return []relaySpec{
		{"relay-empty", "a gRPC relay answering at once", ""},
		{"relay-rtt", "the same relay making the round trip", hookSock},
	}
}

// inProcess runs every server in this process: one Go runtime, scheduler and garbage collector for the
// proxies, their runtimes, the hook server and the relays. Its figures show what sharing them costs;
// processes is how servers run on a node.
func inProcess(ctx context.Context, dir string) ([]variant, string, func() (float64, error), error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		stops = nil
	}
	fail := func(err error) ([]variant, string, func() (float64, error), error) {
		stopAll()
		return nil, "", nil, err
	}
	hookSock := filepath.Join(dir, "hook.sock")
	stopHook, err := serveUnix(ctx, hookSock, registerHookServer)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, stopHook)
	// The remote proxy's hook metrics: its histogram tells how long the hook call took inside the proxy.
	inProxy := prometheus.NewRegistry()
	var variants []variant
	for _, s := range setups() {
		var reg prometheus.Registerer
		if s.name == "remote-1" {
			reg = inProxy
		}
		d, closeHooks, err := s.dispatcher(ctx, hookSock, reg)
		if err != nil {
			return fail(fmt.Errorf("%s: build the hooks: %w", s.name, err))
		}
		stops = append(stops, closeHooks)
		rtSock := filepath.Join(dir, s.name+"-rt.sock")
		stopRT, err := serveUnix(ctx, rtSock, func(s *grpc.Server) { runtimeapi.RegisterRuntimeServiceServer(s, newStubRuntime()) })
		if err != nil {
			return fail(err)
		}
		stops = append(stops, stopRT)
		t, stopProxy, err := startProxyAt(ctx, filepath.Join(dir, s.name+".sock"), rtSock, filepath.Join(dir, s.name+"-state"), s.name, d)
		if err != nil {
			return fail(fmt.Errorf("%s: %w", s.name, err))
		}
		stops = append(stops, stopProxy)
		// A run that measured hooks that did not act would be worthless: check that they did.
		if err := t.verify(ctx, s.want); err != nil {
			return fail(fmt.Errorf("%s: %w", s.name, err))
		}
		variants = append(variants, variant{name: s.name, description: s.description, createContainer: true, once: t.once})
	}
	for _, rl := range relays(hookSock) {
		sock := filepath.Join(dir, rl.name+".sock")
		stopRelay, err := serveRelay(ctx, sock, rl.hook)
		if err != nil {
			return fail(err)
		}
		stops = append(stops, stopRelay)
		c, closeC, err := hookClient(sock)
		if err != nil {
			return fail(err)
		}
		stops = append(stops, closeC)
		variants = append(variants, variant{name: rl.name, description: rl.description, once: hookCall(c)})
	}
	finish := func() (float64, error) {
		stopAll()
		mean, err := meanHookSeconds(inProxy)
		return mean, err
	}
	return variants, hookSock, finish, nil
}

// measure runs every variant's warm-up, then takes turns: each variant makes batch calls in its turn,
// and the variant that starts a round rotates, so that noise and drift hit every variant alike.
func measure(ctx context.Context, variants []variant, o options) ([][]time.Duration, error) {
	for _, v := range variants {
		for range o.warmup {
			if _, err := v.once(ctx); err != nil {
				return nil, fmt.Errorf("%s: warm-up: %w", v.name, err)
			}
		}
	}
	samples := make([][]time.Duration, len(variants))
	for i := range samples {
		samples[i] = make([]time.Duration, 0, o.iterations)
	}
	rounds := (o.iterations + o.batch - 1) / o.batch
	for round := range rounds {
		for k := range variants {
			i := (round + k) % len(variants)
			for n := min(o.batch, o.iterations-len(samples[i])); n > 0; n-- {
				d, err := variants[i].once(ctx)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", variants[i].name, err)
				}
				samples[i] = append(samples[i], d)
			}
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// remoteDispatcher has one remote hook, the hook server on conn, at PreCreateContainer. Its failure
// policy is Fail, so that a broken hook server stops the run instead of being measured as a fast no-op.
func remoteDispatcher(ctx context.Context, conn *remote.Conn, reg prometheus.Registerer) (*hooks.Dispatcher, error) {
	d, err := hooks.NewDispatcher(ctx, nil, reg)
	if err != nil {
		return nil, err
	}
	hook := hooks.Registration{Name: "bench-remote", Order: 5000, FailurePolicy: hooks.Fail, Stages: []hooks.Stage{hooks.PreCreateContainer},
		New: func() (hooks.Hook, error) { return remote.NewClient("bench-remote", conn), nil }}
	if err := d.SetRemote(ctx, []hooks.Registration{hook}); err != nil {
		return nil, err
	}
	return d, nil
}

// meanHookSeconds is the mean of tandem_hook_duration_seconds in reg, in microseconds.
func meanHookSeconds(reg *prometheus.Registry) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("read the hook metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_hook_duration_seconds" {
			continue
		}
		var sum float64
		var n uint64
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			n += m.GetHistogram().GetSampleCount()
		}
		if n > 0 {
			return sum / float64(n) * 1e6, nil
		}
	}
	return 0, errors.New("tandem_hook_duration_seconds has no samples: the remote hook never ran in its proxy")
}

// dispatchOnce runs PreCreateContainer on d for the benchmark's pod and container, as the proxy would; the
// hooks must set CPU shares.
func dispatchOnce(d *hooks.Dispatcher) func(context.Context) (time.Duration, error) {
	sb, ctr := sandboxConfig(), containerConfig()
	r := ctr.GetLinux().GetResources()
	pod := &hooks.PodInfo{Name: sb.GetMetadata().GetName(), Namespace: sb.GetMetadata().GetNamespace(), UID: sb.GetMetadata().GetUid(),
		Labels: sb.GetLabels(), Annotations: sb.GetAnnotations(), CgroupParent: sb.GetLinux().GetCgroupParent()}
	ci := &hooks.ContainerInfo{Name: ctr.GetMetadata().GetName(), Labels: ctr.GetLabels(), Annotations: ctr.GetAnnotations(),
		Env:       map[string]string{"PATH": pathEnv},
		Resources: &hooks.Resources{CPUPeriod: r.GetCpuPeriod(), CPUShares: r.GetCpuShares(), OomScoreAdj: r.GetOomScoreAdj()}}
	return func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		adj, err := d.Run(ctx, hooks.PreCreateContainer, pod, ci)
		took := time.Since(start)
		if err == nil && (adj == nil || adj.Resources == nil || adj.Resources.CPUShares == nil) {
			err = errors.New("the hooks' answer was lost")
		}
		return took, err
	}
}

// kubeletShares is what kubelet asks for a container without CPU requests.
const kubeletShares = 2

// policy changes one field of its own, as Tandem's policies do, so five of them merge without conflict.
type policy struct {
	name string
	adj  *hooks.Adjustment
}

var _ hooks.PreCreateContainerHook = policy{}

func (p policy) Name() string { return p.name }

func (p policy) PreCreateContainer(context.Context, *hooks.PodInfo, *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return p.adj, nil
}

// policies returns the first n of five in-process hooks, in order 100, 200, ….
func policies(n int) []hooks.Registration {
	adjs := []*hooks.Adjustment{
		{Resources: &hooks.ResourceAdjustment{CPUShares: hooks.Int64(512)}},
		{Resources: &hooks.ResourceAdjustment{CpusetCpus: hooks.String("0")}},
		{Resources: &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(200000)}},
		{Resources: &hooks.ResourceAdjustment{MemoryLimitInBytes: hooks.Int64(1 << 30)}},
		{Annotations: map[string]string{"tandem.io/qos": "LS"}},
	}
	regs := make([]hooks.Registration, 0, n)
	for i := range n {
		p := policy{name: fmt.Sprintf("policy%d", i+1), adj: adjs[i]}
		regs = append(regs, hooks.Registration{Name: p.name, Order: 100 * (i + 1), New: func() (hooks.Hook, error) { return p, nil }})
	}
	return regs
}

// proxyTarget is a proxy to time, with one pod to create containers in; srv is set where the proxy runs
// in this process.
type proxyTarget struct {
	srv   *proxy.Server
	rs    runtimeapi.RuntimeServiceClient
	req   *runtimeapi.CreateContainerRequest
	podID string
}

// startProxyAt starts a proxy with dispatcher d on sock, in front of the runtime on rtSock, with its
// state in stateDir, and runs a pod through it. The returned func stops it.
func startProxyAt(ctx context.Context, sock, rtSock, stateDir, name string, d *hooks.Dispatcher) (*proxyTarget, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	cfg := proxy.DefaultConfig()
	cfg.Listen = sock
	cfg.RuntimeEndpoint = "unix://" + rtSock
	cfg.StateDir = stateDir
	srv, err := proxy.New(cfg, frontend.Deps{Hooks: d})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = srv.Close() })
	if err := srv.Recover(ctx); err != nil {
		stop()
		return nil, nil, err
	}
	lis, err := proxy.Listen(ctx, cfg)
	if err != nil {
		stop()
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(sctx, lis); err != nil {
			klog.FromContext(ctx).Error(err, "Proxy stopped", "variant", name)
		}
	}()
	stops = append(stops, func() { cancel(); <-done })
	t, closeClient, err := dialProxy(ctx, sock)
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, closeClient)
	t.srv = srv
	return t, stop, nil
}

// dialProxy connects to the proxy on sock, as kubelet does, and runs a pod through it.
func dialProxy(ctx context.Context, sock string) (*proxyTarget, func(), error) {
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	t := &proxyTarget{rs: runtimeapi.NewRuntimeServiceClient(cc)}
	sandbox := sandboxConfig()
	pod, err := t.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: sandbox})
	if err != nil {
		_ = cc.Close()
		return nil, nil, fmt.Errorf("run a pod through the proxy on %s: %w", sock, err)
	}
	t.podID = pod.GetPodSandboxId()
	t.req = &runtimeapi.CreateContainerRequest{PodSandboxId: t.podID, Config: containerConfig(), SandboxConfig: sandbox}
	return t, func() { _ = cc.Close() }, nil
}

// once times one CreateContainer, then removes the container untimed, so the store keeps its size.
func (t *proxyTarget) once(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	resp, err := t.rs.CreateContainer(ctx, t.req)
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("CreateContainer: %w", err)
	}
	if _, err := t.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: resp.GetContainerId()}); err != nil {
		return 0, fmt.Errorf("RemoveContainer: %w", err)
	}
	return d, nil
}

// verify creates one container and checks, in the proxy's store, that the hooks changed what they should.
func (t *proxyTarget) verify(ctx context.Context, want func(*hooks.Resources, map[string]string) bool) error {
	resp, err := t.rs.CreateContainer(ctx, t.req)
	if err != nil {
		return fmt.Errorf("CreateContainer: %w", err)
	}
	c, ok := t.srv.Store().Container(resp.GetContainerId())
	if !ok || c.Resources == nil || !want(c.Resources, c.Annotations) {
		return fmt.Errorf("the hooks did not act as expected: the store holds %+v", c)
	}
	if _, err := t.rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: resp.GetContainerId()}); err != nil {
		return fmt.Errorf("RemoveContainer: %w", err)
	}
	return nil
}

// builtinDispatcher builds the built-in policies with what tandem-proxy gives them on this machine.
func builtinDispatcher(ctx context.Context) (*hooks.Dispatcher, error) {
	deps := builtinpolicy.Deps{}
	if w, err := cgroup.New("/sys/fs/cgroup"); err == nil {
		deps.Cgroups = w
	}
	topo, err := topology.Discover("/sys")
	if err != nil {
		return nil, fmt.Errorf("CPU topology: %w", err)
	}
	cpus, err := alloc.New(topo, alloc.DefaultConfig())
	if err != nil {
		return nil, err
	}
	deps.CPUSet = cpus
	return hooks.NewDispatcher(ctx, builtinpolicy.Builtin(builtinpolicy.DefaultConfig(), deps), nil)
}

// hookClient is a typed client of the hook server on sock.
func hookClient(sock string) (v1alpha1.RuntimeHookServiceClient, func(), error) {
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return v1alpha1.NewRuntimeHookServiceClient(cc), func() { _ = cc.Close() }, nil
}

// hookCall times one PreCreateContainerHook call on api.
func hookCall(api v1alpha1.RuntimeHookServiceClient) func(context.Context) (time.Duration, error) {
	req := hookRequest()
	return func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		_, err := api.PreCreateContainerHook(ctx, req)
		return time.Since(start), err
	}
}

// hookRequest carries what the proxy sends the hook server for the benchmark's container.
func hookRequest() *v1alpha1.ContainerResourceHookRequest {
	sb, ctr := sandboxConfig(), containerConfig()
	r := ctr.GetLinux().GetResources()
	return &v1alpha1.ContainerResourceHookRequest{
		PodMeta: &v1alpha1.PodSandboxMetadata{Name: sb.GetMetadata().GetName(), Uid: sb.GetMetadata().GetUid(),
			Namespace: sb.GetMetadata().GetNamespace()},
		ContainerMata:        &v1alpha1.ContainerMetadata{Name: ctr.GetMetadata().GetName()},
		ContainerAnnotations: ctr.GetAnnotations(),
		ContainerResources: &v1alpha1.LinuxContainerResources{CpuPeriod: r.GetCpuPeriod(), CpuQuota: r.GetCpuQuota(),
			CpuShares: r.GetCpuShares(), MemoryLimitInBytes: r.GetMemoryLimitInBytes(), OomScoreAdj: r.GetOomScoreAdj()},
		PodAnnotations:  sb.GetAnnotations(),
		PodLabels:       sb.GetLabels(),
		PodCgroupParent: sb.GetLinux().GetCgroupParent(),
		ContainerEnvs:   map[string]string{"PATH": pathEnv},
	}
}

const pathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// sandboxConfig and containerConfig are shaped like kubelet's for a best-effort pod, so that every
// field the hooks set is a change.
func sandboxConfig() *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web-7d4b9c-x2x8q", Namespace: "default", Uid: "6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11"},
		Labels: map[string]string{
			"app": "web", "pod-template-hash": "7d4b9c",
			"io.kubernetes.pod.name": "web-7d4b9c-x2x8q", "io.kubernetes.pod.namespace": "default",
			"io.kubernetes.pod.uid": "6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11",
		},
		Annotations:  map[string]string{"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2026-01-01T00:00:00Z"},
		LogDirectory: "/var/log/pods/default_web-7d4b9c-x2x8q_6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11",
		Linux:        &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/pod6f1c1f4e-3b8a-4d7e-9a51-2b0c2f9d4e11"},
	}
}

func containerConfig() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "web"},
		Image:    &runtimeapi.ImageSpec{Image: "docker.io/library/web:1.0"},
		Command:  []string{"/web", "--port=8080"},
		Envs:     []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte(pathEnv)}},
		Labels:   map[string]string{"io.kubernetes.container.name": "web", "io.kubernetes.pod.name": "web-7d4b9c-x2x8q"},
		Annotations: map[string]string{"io.kubernetes.container.hash": "3f2a1b0c", "io.kubernetes.container.restartCount": "0",
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log"},
		LogPath: "web/0.log",
		Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
			CpuPeriod: 100000, CpuShares: kubeletShares, OomScoreAdj: 1000,
		}},
	}
}
