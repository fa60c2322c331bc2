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
	"github.com/tandemkit/tandem/bench/internal/hostinfo"
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
			return nil, fmt.Errorf("no answer to Version (last: %v): %w", err, ctx.Err())
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
	// Clean-up must run even after Ctrl-C has cancelled ctx.
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	}
	want := func(name string) bool { return slices.Contains(o.targets, name) }

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
	proxyBin := o.proxyBinary
	if want(targetTandem) && proxyBin == "" && !o.aa {
		logger.Info("Building tandem-proxy")
		if proxyBin, err = framework.BuildProxy(ctx, filepath.Join(dir, "bin")); err != nil {
			return err
		}
	}

	// The floor is built as tandem-proxy is, unless it runs in this process or from this executable; the
	// A/A check's second floor is always that build.
	var floorBin floorBuild
	if (want(targetFloor) && !o.floorInProcess && !o.floorFromBenchmark) || (want(targetTandem) && o.aa) {
		logger.Info("Building the floor proxy")
		if floorBin.path, err = framework.BuildPackage(ctx, filepath.Join(dir, "bin"), floorPackage, "floor-proxy"); err != nil {
			return err
		}
	}
	twinBin := floorBin
	if o.floorFromBenchmark {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this benchmark's executable for --floor-from-benchmark: %w", err)
		}
		floorBin = floorBuild{path: exe, fromBenchmark: true}
	}

	logger.Info("Starting containerd", "flavor", o.flavor)
	keepDir, ran = true, true // keep until containerd is stopped cleanly
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Flavor: o.flavor, Dir: filepath.Join(dir, "c")})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := cleanupCtx()
		defer cancel()
		logger.Info("Stopping containerd and removing the pods")
		if err := ctrd.Stop(cctx); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("stop containerd: %w", err))
			return
		}
		keepDir = false
	}()

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
	logger.Info("Pods running", "pods", o.pods, "containers", o.pods*o.containersPerPod, "took", time.Since(started).Round(time.Millisecond))

	var targets []target
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	addTarget := func(name, endpoint string) error {
		conn, err := dialCRI(endpoint)
		if err != nil {
			return err
		}
		conns = append(conns, conn)
		targets = append(targets, target{name: name, client: runtimeapi.NewRuntimeServiceClient(conn)})
		return nil
	}

	if want(targetDirect) {
		if err := addTarget(targetDirect, ctrd.Endpoint); err != nil {
			return err
		}
	}
	var floor *floorProcess
	if want(targetFloor) && o.floorInProcess {
		endpoint, stopFloor, err := serveFloorInProcess(ctx, dir, ctrd.Endpoint, o.floorUnary)
		if err != nil {
			return err
		}
		defer stopFloor()
		if err := addTarget(targetFloor, endpoint); err != nil {
			return err
		}
	} else if want(targetFloor) {
		if floor, err = startFloor(dir, ctrd.Endpoint, o.floorUnary, floorBin, 0); err != nil {
			return err
		}
		defer func() {
			cctx, cancel := cleanupCtx()
			defer cancel()
			if err := floor.Stop(cctx); err != nil {
				retErr = errors.Join(retErr, err)
			}
		}()
		if err := addTarget(targetFloor, floor.Endpoint); err != nil {
			return err
		}
	}
	var tandem *framework.Proxy
	var twin *floorProcess // the A/A check's second floor
	var tandemFresh memory
	if want(targetTandem) && o.aa {
		twinDir := filepath.Join(dir, "aa")
		if err := os.Mkdir(twinDir, 0o755); err != nil {
			return fmt.Errorf("create A/A dir: %w", err)
		}
		twin, err = startFloor(twinDir, ctrd.Endpoint, o.floorUnary, twinBin, o.aaExtraWork)
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := cleanupCtx()
			defer cancel()
			if err := twin.Stop(cctx); err != nil {
				retErr = errors.Join(retErr, err)
			}
		}()
		if err := addTarget(targetTandem, twin.Endpoint); err != nil {
			return err
		}
	} else if want(targetTandem) {
		logger.Info("Starting tandem-proxy", "binary", proxyBin)
		tandem, err = framework.StartProxy(ctx, framework.ProxyOptions{
			Binary:          proxyBin,
			RuntimeEndpoint: ctrd.Endpoint,
			Dir:             filepath.Join(dir, "p"),
			ExtraArgs:       []string{"-v", strconv.Itoa(o.proxyVerbosity)},
		})
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := cleanupCtx()
			defer cancel()
			code, err := tandem.Stop(cctx)
			if err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("stop tandem-proxy: %w", err))
			} else if code != 0 {
				retErr = errors.Join(retErr, fmt.Errorf("tandem-proxy exited with code %d on SIGTERM, want 0: see %s", code, tandem.LogPath))
			}
		}()
		if err := addTarget(targetTandem, tandem.Endpoint); err != nil {
			return err
		}
	}

	var runtimeVersion string
	for _, t := range targets {
		v, err := waitAnswering(ctx, t.client, 30*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		runtimeVersion = v.GetRuntimeName() + " " + v.GetRuntimeVersion()
		if err := checkInventory(ctx, t, o.pods, o.pods*o.containersPerPod); err != nil {
			return err
		}
	}
	if tandem != nil {
		// Its footprint once the store holds every pod and container, before
		// any load: what a node pays right after tandem-proxy starts.
		if tandemFresh, err = readMemory(tandem.PID()); err != nil {
			return err
		}
	}

	rep := newReport(o, runtimeVersion)
	if tandem != nil {
		rep.proxyBuild = buildOf(proxyBin)
	}
	p := plan{iterations: o.iterations, batchPerWorker: o.batch, warmupPerWorker: o.warmup, collectBetweenBatches: !o.gcInBatches}
	// CPU time each proxy process spends on the same calls: where latency
	// differs, this tells whether it is work or waiting.
	proxyPIDs := map[string]int{}
	if floor != nil {
		proxyPIDs[targetFloor] = floor.PID()
	}
	if tandem != nil {
		proxyPIDs[targetTandem] = tandem.PID()
	}
	if twin != nil {
		proxyPIDs[targetTandem] = twin.PID()
	}
	for i := range o.runs {
		logger.Info("Measuring latency", "run", i+1, "of", o.runs, "targets", o.targets, "iterations", p.iterations)
		run, err := measureRun(ctx, targets, p, proxyPIDs, o.warmup, o.iterations)
		if err != nil {
			return err
		}
		rep.runs = append(rep.runs, run)
	}

	if tandem != nil && o.idleSeconds > 0 {
		logger.Info("Measuring idle cost", "settle", o.idleSettle, "seconds", o.idleSeconds)
		if err := runctx.Sleep(ctx, o.idleSettle); err != nil {
			return err
		}
		idle, err := measureIdleAll(ctx, tandem.PID(), floor, time.Duration(o.idleSeconds)*time.Second)
		if err != nil {
			return err
		}
		idle.TandemFresh = tandemFresh
		rep.Idle = &idle
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

// measureRun is one complete latency measurement of the targets, with the CPU time each proxy process
// spent on it.
func measureRun(ctx context.Context, targets []target, p plan, proxyPIDs map[string]int, warmup, iterations int) (latencyRun, error) {
	logger := klog.FromContext(ctx)
	run := latencyRun{LoadBefore: hostinfo.LoadAverage()}
	ticksBefore := map[string]int64{}
	switchesBefore := map[string]switches{}
	for name, pid := range proxyPIDs {
		t, err := readCPUTicks(pid)
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
	run.LoadAfter = hostinfo.LoadAverage()
	calls := len(benchmarkRPCs()) * len(benchmarkModes()) * iterations
	for _, m := range benchmarkModes() {
		calls += len(benchmarkRPCs()) * warmup * m.workers
	}
	for name, pid := range proxyPIDs {
		after, err := readCPUTicks(pid)
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
