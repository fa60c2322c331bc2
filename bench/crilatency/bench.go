package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/floorproxy"
	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/procstat"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

const (
	targetDirect = "direct"
	targetFloor  = "floor"
	targetTandem = "tandem"
)

// dialCRI connects the way kubelet's CRI client does as far as the wire is
// concerned: one HTTP/2 connection over the unix socket, 16 MiB limits.
func dialCRI(endpoint string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(floorproxy.CRIMaxMsgSize), grpc.MaxCallSendMsgSize(floorproxy.CRIMaxMsgSize)),
	)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", endpoint, err)
	}
	return conn, nil
}

// waitAnswering polls Version until the target answers or timeout.
func waitAnswering(ctx context.Context, c runtimeapi.RuntimeServiceClient, timeout time.Duration) (*runtimeapi.VersionResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := c.Version(callCtx, &runtimeapi.VersionRequest{Version: "0.1.0"})
		callCancel()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no answer to Version (last: %w): %w", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkInventory makes sure a target sees the pods and containers the run
// created, so that no figure comes from a proxy that answers something else.
func checkInventory(ctx context.Context, t target, pods, containers int) error {
	ps, err := t.client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("%s: ListPodSandbox: %w", t.name, err)
	}
	cs, err := t.client.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}},
	})
	if err != nil {
		return fmt.Errorf("%s: ListContainers: %w", t.name, err)
	}
	if len(ps.GetItems()) != pods || len(cs.GetContainers()) != containers {
		return fmt.Errorf("%s lists %d pods and %d running containers, want %d and %d: the proxy does not show the runtime's state",
			t.name, len(ps.GetItems()), len(cs.GetContainers()), pods, containers)
	}
	return nil
}

func runBenchmark(ctx context.Context, o options) (retErr error) {
	if err := o.validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	if err := framework.EnsureDebianPackages(ctx); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(o.workDir, "tb")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	// The dir is removed only when containerd stopped cleanly: with a mount
	// left behind, removing it would reach into a container's rootfs.
	keepDir, ran := false, false
	defer func() {
		// After a failure (not a Ctrl-C) the logs of containerd and of the
		// proxies are worth keeping.
		if keepDir || (ran && retErr != nil && ctx.Err() == nil) {
			logger.Info("Work dir kept for inspection", "dir", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("remove work dir: %w", err))
		}
	}()

	// Build first: a broken build should fail before 100 containers start.
	bins, err := buildBinaries(ctx, o, filepath.Join(dir, "bin"))
	if err != nil {
		return err
	}

	logger.Info("Starting containerd", "flavor", o.flavor)
	keepDir, ran = true, true // keep until containerd is stopped cleanly
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Flavor: o.flavor, Dir: filepath.Join(dir, "c")})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		logger.Info("Stopping containerd and removing the pods")
		if err := ctrd.Stop(cctx); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("stop containerd: %w", err))
			return
		}
		keepDir = false
	}()
	if err := startPods(ctx, ctrd, o); err != nil {
		return err
	}
	ps := &proxies{}
	defer func() { retErr = errors.Join(retErr, ps.stop(ctx)) }()
	if err := ps.start(ctx, o, dir, ctrd, bins); err != nil {
		return err
	}
	rep, err := ps.measure(ctx, o, bins)
	if err != nil {
		return err
	}
	rep.print(os.Stdout)
	if o.jsonPath != "" {
		if err := rep.writeJSON(o.jsonPath); err != nil {
			return err
		}
		logger.Info("Results written", "path", o.jsonPath)
	}
	return nil
}

// cleanupCtx is a deadline of its own for one cleanup, which must run even after Ctrl-C has cancelled
// ctx.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
}

// binaries are the proxies a run starts: tandem-proxy, the floor, and the A/A check's second floor.
type binaries struct {
	proxy       string
	floor, twin floorBuild
}

// buildBinaries builds what the run's targets need.
func buildBinaries(ctx context.Context, o options, dir string) (binaries, error) {
	logger := klog.FromContext(ctx)
	want := func(name string) bool { return slices.Contains(o.targets, name) }
	b := binaries{proxy: o.proxyBinary}
	var err error
	if want(targetTandem) && b.proxy == "" && !o.aa {
		logger.Info("Building tandem-proxy")
		if b.proxy, err = framework.BuildProxy(ctx, dir); err != nil {
			return b, err
		}
	}
	// The floor is built as tandem-proxy is, unless it runs in this process or from this executable; the
	// A/A check's second floor is always that build.
	if (want(targetFloor) && !o.floorInProcess && !o.floorFromBenchmark) || (want(targetTandem) && o.aa) {
		logger.Info("Building the floor proxy")
		if b.floor.path, err = framework.BuildPackage(ctx, dir, floorPackage, "floor-proxy"); err != nil {
			return b, err
		}
	}
	b.twin = b.floor
	if o.floorFromBenchmark {
		exe, err := os.Executable()
		if err != nil {
			return b, fmt.Errorf("find this benchmark's executable for --floor-from-benchmark: %w", err)
		}
		b.floor = floorBuild{path: exe, fromBenchmark: true}
	}
	return b, nil
}

// startPods runs the run's pods and their containers directly on containerd.
func startPods(ctx context.Context, ctrd *framework.Containerd, o options) error {
	rs, _, err := framework.NewCRIClients(ctx, ctrd.Endpoint)
	if err != nil {
		return err
	}
	started := time.Now()
	for i := range o.pods {
		cfg := framework.PodSandboxConfig(fmt.Sprintf("bench-%02d", i), "tandem-bench", true)
		if _, _, err := framework.RunPod(ctx, rs, cfg, o.containersPerPod); err != nil {
			return err
		}
	}
	klog.FromContext(ctx).Info("Pods running", "pods", o.pods, "containers", o.pods*o.containersPerPod, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

// proxies are the targets a run measures and the proxy processes behind them.
type proxies struct {
	targets []target
	conns   []*grpc.ClientConn
	floor   *floorProcess    // the floor in a process of its own; nil when it runs in this one
	twin    *floorProcess    // the A/A check's second floor, in tandem-proxy's place
	tandem  *framework.Proxy // nil in the A/A check
	undo    runctx.Cleanups
	// runtimeVersion is the runtime's name and version, as the last target answered Version.
	runtimeVersion string
}

// stop stops what start started, last first, then closes the connections.
func (ps *proxies) stop(ctx context.Context) error {
	err := ps.undo.Run(ctx)
	for _, c := range ps.conns {
		_ = c.Close()
	}
	return err
}

func (ps *proxies) add(name, endpoint string) error {
	conn, err := dialCRI(endpoint)
	if err != nil {
		return err
	}
	ps.conns = append(ps.conns, conn)
	ps.targets = append(ps.targets, target{name: name, client: runtimeapi.NewRuntimeServiceClient(conn)})
	return nil
}

// start starts the run's targets in the order of the table: direct, floor, tandem (or the A/A check's
// second floor in its place), and checks that each shows the runtime's pods.
func (ps *proxies) start(ctx context.Context, o options, dir string, ctrd *framework.Containerd, bins binaries) error {
	want := func(name string) bool { return slices.Contains(o.targets, name) }
	if want(targetDirect) {
		if err := ps.add(targetDirect, ctrd.Endpoint); err != nil {
			return err
		}
	}
	if want(targetFloor) {
		if err := ps.startFloor(ctx, o, dir, ctrd.Endpoint, bins.floor); err != nil {
			return err
		}
	}
	if want(targetTandem) && o.aa {
		if err := ps.startTwin(o, dir, ctrd.Endpoint, bins.twin); err != nil {
			return err
		}
	} else if want(targetTandem) {
		if err := ps.startTandem(ctx, o, dir, ctrd.Endpoint, bins.proxy); err != nil {
			return err
		}
	}
	for _, t := range ps.targets {
		v, err := waitAnswering(ctx, t.client, 30*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		ps.runtimeVersion = v.GetRuntimeName() + " " + v.GetRuntimeVersion()
		if err := checkInventory(ctx, t, o.pods, o.pods*o.containersPerPod); err != nil {
			return err
		}
	}
	return nil
}

func (ps *proxies) startFloor(ctx context.Context, o options, dir, backend string, build floorBuild) error {
	if o.floorInProcess {
		endpoint, stopFloor, err := serveFloorInProcess(ctx, dir, backend, o.floorUnary)
		if err != nil {
			return err
		}
		ps.undo.Add(func(context.Context) error { stopFloor(); return nil })
		return ps.add(targetFloor, endpoint)
	}
	floor, err := startFloor(dir, backend, o.floorUnary, build, 0)
	if err != nil {
		return err
	}
	ps.floor = floor
	ps.undo.Add(floor.Stop)
	return ps.add(targetFloor, floor.Endpoint)
}

func (ps *proxies) startTwin(o options, dir, backend string, build floorBuild) error {
	twinDir := filepath.Join(dir, "aa")
	if err := os.Mkdir(twinDir, 0o755); err != nil {
		return fmt.Errorf("create A/A dir: %w", err)
	}
	twin, err := startFloor(twinDir, backend, o.floorUnary, build, o.aaExtraWork)
	if err != nil {
		return err
	}
	ps.twin = twin
	ps.undo.Add(twin.Stop)
	return ps.add(targetTandem, twin.Endpoint)
}

func (ps *proxies) startTandem(ctx context.Context, o options, dir, backend, bin string) error {
	klog.FromContext(ctx).Info("Starting tandem-proxy", "binary", bin)
	tandem, err := framework.StartProxy(ctx, framework.ProxyOptions{
		Binary:          bin,
		RuntimeEndpoint: backend,
		Dir:             filepath.Join(dir, "p"),
		ExtraArgs:       []string{"-v", strconv.Itoa(o.proxyVerbosity)},
	})
	if err != nil {
		return err
	}
	ps.tandem = tandem
	ps.undo.Add(func(ctx context.Context) error {
		code, err := tandem.Stop(ctx)
		if err != nil {
			return fmt.Errorf("stop tandem-proxy: %w", err)
		} else if code != 0 {
			return fmt.Errorf("tandem-proxy exited with code %d on SIGTERM, want 0: see %s", code, tandem.LogPath)
		}
		return nil
	})
	return ps.add(targetTandem, tandem.Endpoint)
}

// measure takes the latency runs and, with tandem-proxy, its cost at rest.
func (ps *proxies) measure(ctx context.Context, o options, bins binaries) (*report, error) {
	logger := klog.FromContext(ctx)
	var tandemFresh memory
	rep := newReport(o, ps.runtimeVersion)
	if ps.tandem != nil {
		// Its footprint once the store holds every pod and container, before
		// any load: what a node pays right after tandem-proxy starts.
		var err error
		if tandemFresh, err = readMemory(ps.tandem.PID()); err != nil {
			return nil, err
		}
		rep.proxyBuild = buildOf(bins.proxy)
	}
	p := plan{iterations: o.iterations, batchPerWorker: o.batch, warmupPerWorker: o.warmup, collectBetweenBatches: !o.gcInBatches}
	// CPU time each proxy process spends on the same calls: where latency
	// differs, this tells whether it is work or waiting.
	proxyPIDs := map[string]int{}
	if ps.floor != nil {
		proxyPIDs[targetFloor] = ps.floor.PID()
	}
	if ps.tandem != nil {
		proxyPIDs[targetTandem] = ps.tandem.PID()
	}
	if ps.twin != nil {
		proxyPIDs[targetTandem] = ps.twin.PID()
	}
	for i := range o.runs {
		logger.Info("Measuring latency", "run", i+1, "of", o.runs, "targets", o.targets, "iterations", p.iterations)
		run, err := measureRun(ctx, ps.targets, p, proxyPIDs, o.warmup, o.iterations)
		if err != nil {
			return nil, err
		}
		rep.runs = append(rep.runs, run)
	}
	if ps.tandem == nil || o.idleSeconds <= 0 {
		return rep, nil
	}
	logger.Info("Measuring idle cost", "settle", o.idleSettle, "seconds", o.idleSeconds)
	if err := runctx.Sleep(ctx, o.idleSettle); err != nil {
		return nil, err
	}
	idle, err := measureIdleAll(ctx, ps.tandem.PID(), ps.floor, time.Duration(o.idleSeconds)*time.Second)
	if err != nil {
		return nil, err
	}
	idle.TandemFresh = tandemFresh
	rep.Idle = &idle
	return rep, nil
}

// measureRun is one complete latency measurement of the targets, with the CPU time each proxy process
// spent on it.
func measureRun(ctx context.Context, targets []target, p plan, proxyPIDs map[string]int, warmup, iterations int) (latencyRun, error) {
	logger := klog.FromContext(ctx)
	run := latencyRun{LoadBefore: figures.LoadAverage()}
	ticksBefore := map[string]int64{}
	switchesBefore := map[string]switches{}
	for name, pid := range proxyPIDs {
		t, err := procstat.CPUTicks(pid)
		if err != nil {
			return run, err
		}
		ticksBefore[name] = t
		if switchesBefore[name], err = readSwitches(pid); err != nil {
			return run, err
		}
	}
	measureStart := time.Now()
	lastLog := time.Now()
	samples, err := measure(ctx, targets, benchmarkRPCs(), benchmarkModes(), p, func(done, total int) {
		if time.Since(lastLog) >= 15*time.Second || done == total {
			logger.Info("Progress", "batches", done, "of", total, "elapsed", time.Since(measureStart).Round(time.Second))
			lastLog = time.Now()
		}
	})
	if err != nil {
		return run, err
	}
	run.Seconds = time.Since(measureStart).Seconds()
	run.LoadAfter = figures.LoadAverage()
	calls := len(benchmarkRPCs()) * len(benchmarkModes()) * iterations
	for _, m := range benchmarkModes() {
		calls += len(benchmarkRPCs()) * warmup * m.workers
	}
	for name, pid := range proxyPIDs {
		after, err := procstat.CPUTicks(pid)
		if err != nil {
			return run, err
		}
		sw, err := readSwitches(pid)
		if err != nil {
			return run, err
		}
		run.proxyCPU = append(run.proxyCPU, proxyCPU{Target: name, Ticks: after - ticksBefore[name], Calls: calls, Switches: sw.since(switchesBefore[name])})
	}
	slices.SortFunc(run.proxyCPU, func(a, b proxyCPU) int { return strings.Compare(a.Target, b.Target) })
	run.rows = latencyRows(samples, targets)
	return run, nil
}

// idleReport is tandem-proxy's footprint at rest, beside the floor proxy's
// over the same window for scale.
type idleReport struct {
	TandemFresh memory    // right after start, before any load
	Tandem      idleCost  // during the idle window
	Floor       *idleCost // nil when the floor did not run
}

func measureIdleAll(ctx context.Context, tandemPID int, floor *floorProcess, d time.Duration) (idleReport, error) {
	var rep idleReport
	type result struct {
		c   idleCost
		err error
	}
	floorRes := make(chan result, 1)
	if floor != nil {
		go func() {
			c, err := measureIdle(ctx, floor.PID(), d)
			floorRes <- result{c, err}
		}()
	}
	var err error
	if rep.Tandem, err = measureIdle(ctx, tandemPID, d); err != nil {
		return rep, fmt.Errorf("tandem-proxy: %w", err)
	}
	if floor != nil {
		r := <-floorRes
		if r.err != nil {
			return rep, fmt.Errorf("floor proxy: %w", r.err)
		}
		rep.Floor = &r.c
	}
	// After both windows, so that reading the page maps is in neither's CPU time.
	rep.Tandem.measureExecutable()
	if rep.Floor != nil {
		rep.Floor.measureExecutable()
	}
	return rep, nil
}
