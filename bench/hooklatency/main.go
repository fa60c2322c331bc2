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
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote"
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
		if err := figures.WriteJSON(o.jsonPath, reps); err != nil {
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
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			logger.Error(err, "The run's directory is left behind; remove it by hand", "dir", dir)
		}
	}()

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

	m := machine{Machine: figures.ReadMachine(), LoadBefore: figures.LoadAverage()}
	m.Processes = separate
	logger.Info("Measuring", "variants", len(variants), "iterations", o.iterations, "batch", o.batch, "warmup", o.warmup, "processes", separate)
	samples, err := measure(ctx, variants, o)
	if err != nil {
		return nil, err
	}
	m.LoadAfter = figures.LoadAverage()
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
