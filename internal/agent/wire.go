package agent

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/actuate/yield"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
	"github.com/tandemkit/tandem/hooks/policy/podspec"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/hooks/remote"
	"github.com/tandemkit/tandem/internal/heaprelease"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/kubeclient"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
	"github.com/tandemkit/tandem/metrics/reporter"
	"github.com/tandemkit/tandem/proxy"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/resctrl"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

// wiring is one run of the agent as it is put together; each step reads what the earlier ones made.
// It is the composition root: the parts it joins are built and tested in their own packages.
type wiring struct {
	b   Binary
	st  settings
	reg *prometheus.Registry

	cgroups cgroup.Writer // nil: no cgroup hierarchy
	cpus    *alloc.Allocator
	rdt     frontend.RDT // nil: no resctrl
	// refresh asks the front end to move every live container to what the policies decide now;
	// poolsKick wakes the host application loop and beStarted the BE thread loop. One pending notice
	// is enough for each.
	refresh, poolsKick, beStarted chan struct{}
	policyDeps                    policy.Deps

	cons       *consumers
	dispatcher *hooks.Dispatcher
	builtin    []hooks.Registration
	loops      *supervise.Group
	fileSource *source.Source

	fe      FrontEnd
	serve   func(context.Context) error
	stopper evict.SandboxStopper
	// closers run in reverse on the way out, after the node loops stopped and restored.
	closers []func()
}

func run(ctx context.Context, b Binary, args []string) (err error) {
	st, err := load(b, args, os.Getenv, "/proc")
	if err != nil {
		return err
	}
	ctx = klog.NewContext(ctx, klog.Background().WithName(b.Name))
	w := &wiring{b: b, st: st, reg: prometheus.NewRegistry()}
	w.logStart(ctx)
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := w.node(ctx); err != nil {
		return err
	}
	if err := w.policies(ctx); err != nil {
		return err
	}
	// Every loop started below runs under one group and ends when ctx does; one that stops earlier is
	// logged and started again, and /healthz names it meanwhile. On the way out the agent waits for
	// them, has them restore the node, and only then closes the runtime connection: the suppress loop
	// lifts its clamp through it.
	ctx, cancel := context.WithCancel(ctx)
	if w.loops, err = supervise.New(ctx, w.reg, supervise.Backoff()); err != nil {
		cancel()
		return err
	}
	defer func() {
		cancel()
		w.loops.Wait()
		w.cons.restore(ctx, restoreTimeout)
		for _, c := range slices.Backward(w.closers) {
			c()
		}
	}()
	if err := w.configSource(ctx); err != nil {
		return err
	}
	if err := w.frontEnd(ctx); err != nil {
		return err
	}
	if err := w.nodeLoops(ctx); err != nil {
		return err
	}
	return w.serve(ctx)
}

// logStart says what the agent starts with: where it listens, the Go runtime's settings, and the
// kubelet settings it follows.
func (w *wiring) logStart(ctx context.Context) {
	logger, st, cfg := klog.FromContext(ctx), w.st, w.st.proxy
	if w.b.NRI != nil {
		logger.Info("Starting", "nriSocket", st.nri.Socket, "runtimeEndpoint", cfg.RuntimeEndpoint, "stateDir", cfg.StateDir, "config", st.configFile)
	} else {
		logger.Info("Starting", "listen", cfg.Listen, "runtimeEndpoint", cfg.RuntimeEndpoint, "stateDir", cfg.StateDir, "config", st.configFile)
	}
	// What the runtime runs with, read back from it: Main set these unless the environment did.
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	gcTarget := strconv.FormatInt(int64(gogc[0].Value.Uint64()), 10) // GOGC=off reads as -1
	if gcTarget == "-1" {
		gcTarget = "off"
	}
	logger.Info("Go runtime settings; GOGC and GODEBUG=memprofilerate=N in the environment override them",
		"gogc", gcTarget, "heapProfileRate", runtime.MemProfileRate)
	logger.Info("Kubelet settings followed", "cgroupDriver", st.kubelet.cgroupDriver, "cgroupDriverFrom", st.kubelet.cgroupDriverFrom,
		"cpuManagerPolicy", st.kubelet.cpuManagerPolicy, "cpuManagerPolicyFrom", st.kubelet.cpuManagerPolicyFrom,
		"lookup", st.kubelet.lookup, "guaranteedPodsAreLSR", st.policy.QoS.StaticCPUManager)
}

// node finds what the node offers: its cgroup hierarchy, CPU topology and resctrl.
func (w *wiring) node(ctx context.Context) error {
	logger, st := klog.FromContext(ctx), w.st
	cgroups, err := cgroup.New(st.cgroupRoot)
	if err != nil {
		// Pod-level settings are optional: the agent still forwards and runs container-level policies.
		logger.Info("No cgroup hierarchy; pod-level settings from hooks will not be applied", "cgroupRoot", st.cgroupRoot, "err", err)
	} else {
		w.cgroups = cgroups
	}
	if topo, err := topology.Discover(st.sysfsRoot); err != nil {
		logger.Error(err, "No CPU topology; the cpuset policy is off", "sysfsRoot", st.sysfsRoot)
	} else if w.cpus, err = alloc.New(topo, st.cpus); err != nil {
		return fmt.Errorf("cpuset allocator: %w", err)
	}
	// The resctrl policy names a container's RDT class; the front end moves its tasks there.
	if w.cgroups != nil {
		if fs, err := resctrl.Open(resctrl.DefaultRoot); err == nil {
			w.rdt = resctrl.CgroupMover{FS: fs, CgroupRoot: st.cgroupRoot, CgroupVersion: w.cgroups.Version()}
		}
	}
	w.refresh, w.poolsKick, w.beStarted = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	w.policyDeps = policy.Deps{
		Cgroups:   w.cgroups,
		CPUSet:    w.cpus,
		BEStarted: func() { notify(w.beStarted) },
		// The cpuset policy asks for a refresh when exclusive CPUs come or go; the host application
		// loop passes at once.
		PoolsChanged: func() { notify(w.refresh); notify(w.poolsKick) },
	}
	return nil
}

// notify leaves a notice in ch unless one is pending already.
func notify(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// policies builds the hooks: the built-in policies for the configuration in force, and the remote hooks
// of the hook directory, in force before the first call is served.
func (w *wiring) policies(ctx context.Context) error {
	logger, st := klog.FromContext(ctx), w.st
	w.cons = &consumers{base: st.policy, deps: w.policyDeps, colocation: st.colocation, resolved: *st.colocation.Load(), firstApplied: make(chan struct{})}
	w.builtin = w.cons.builtin(ctx)
	dispatcher, err := hooks.NewDispatcher(ctx, w.builtin, w.reg)
	if err != nil {
		return err
	}
	if err := dispatcher.SetLimits(st.hookLimits); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	w.dispatcher, w.cons.dispatcher = dispatcher, dispatcher
	for _, h := range dispatcher.Hooks() {
		logger.Info("Hook in force", "hook", h.Name, "order", h.Order, "stages", h.Stages, "failurePolicy", h.FailurePolicy, "remote", h.Remote)
	}
	return nil
}

// configSource follows the remote hook directory and, if there is one, the slo-config file, which is
// read before the first call is served so that the policies start with its settings.
func (w *wiring) configSource(ctx context.Context) error {
	logger, st := klog.FromContext(ctx), w.st
	loader := remote.NewLoader(remote.LoaderConfig{Dir: st.hooksDir, Builtin: w.builtin})
	w.closers = append(w.closers, func() { _ = loader.Close() })
	if regs, err := loader.Load(ctx); err != nil {
		logger.Error(err, "Hook directory not loaded; starting without remote hooks", "hooksDir", st.hooksDir)
	} else if err := w.dispatcher.SetRemote(ctx, regs); err != nil {
		logger.Error(err, "Remote hooks rejected; starting without them", "hooksDir", st.hooksDir)
	}
	// A watcher that cannot watch (inotify instances exhausted) is started again until it can.
	w.loops.Go("hooks-dir", remote.NewWatcher(loader, w.dispatcher.SetRemote).Run)
	if st.sloConfig == "" {
		return nil
	}
	applied := make(chan struct{})
	var once sync.Once
	src, err := source.New(source.Config{File: st.sloConfig, NodeName: st.podSpec.NodeName, NodeLabels: st.nodeLabels},
		source.Deps{Apply: func(ctx context.Context, u source.Update) { w.cons.apply(ctx, u); once.Do(func() { close(applied) }) }})
	if err != nil {
		return err
	}
	w.fileSource = src
	w.loops.Go("slo-config-file", src.Run)
	select {
	case <-applied:
	case <-ctx.Done():
	}
	return nil
}

// frontEnd starts the part that sees the lifecycle calls: the NRI plugin, or the CRI proxy. Either way
// the exclusive CPUs of the containers it finds are restored before the first call is handled, so the
// pools, /debug/pools and the policies see them from the start.
func (w *wiring) frontEnd(ctx context.Context) error {
	logger, cfg := klog.FromContext(ctx), w.st.proxy
	restore := func(ctx context.Context, snap *store.Snapshot) {
		if n := restoreExclusive(ctx, w.cpus, snap); n > 0 {
			p := w.cpus.Pools()
			logger.Info("Exclusive CPUs of recovered containers restored", "count", n, "lse", p.LSE.String(), "lsr", p.LSR.String(), "ls", p.LS.String(), "be", p.BE.String())
			w.policyDeps.PoolsChanged()
		}
	}
	if w.b.NRI != nil {
		plugin, err := w.b.NRI(w.st.nri, frontend.Deps{Hooks: w.dispatcher, Cgroups: w.cgroups, RDT: w.rdt, Registerer: w.reg, Refresh: w.refresh, Synchronized: restore})
		if err != nil {
			return err
		}
		// Without the API server, eviction stops the pod through the runtime.
		rt, err := newRuntimeStopper(cfg.RuntimeEndpoint)
		if err != nil {
			return err
		}
		w.closers = append(w.closers, func() { _ = rt.Close() })
		w.fe, w.serve, w.stopper = plugin, plugin.Run, rt
		return nil
	}
	srv, err := proxy.New(cfg, frontend.Deps{Hooks: w.dispatcher, Cgroups: w.cgroups, RDT: w.rdt, Registerer: w.reg, Refresh: w.refresh})
	if err != nil {
		return err
	}
	w.closers = append(w.closers, func() { _ = srv.Close() })
	if err := srv.Recover(ctx); err != nil {
		return err
	}
	restore(ctx, srv.Store().Snapshot())
	lis, err := proxy.Listen(ctx, cfg)
	if err != nil {
		return err
	}
	// Closed by Serve; closed here if the agent fails before.
	served := false
	w.closers = append(w.closers, func() {
		if !served {
			_ = lis.Close()
		}
	})
	w.fe, w.stopper = srv, srv
	w.serve = func(ctx context.Context) error { served = true; return srv.Serve(ctx, lis) }
	return nil
}

// nodeLoops serves /metrics and the debug socket and starts the node loops: measure, suppress and evict,
// and, once the API server answers, publish what batch work may reclaim.
func (w *wiring) nodeLoops(ctx context.Context) error {
	st := w.st
	_, canYield := yield.Mechanism()
	vm, vmWhy := headroom.DetectVM("/proc", "/sys")
	col, err := collector.New(collectorConfig(st), collector.Deps{ProcRoot: "/proc", CgroupRoot: st.cgroupRoot,
		Targets: collectorTargets(w.fe.Store(), st.policy.QoS.StaticCPUManager), Registerer: w.reg})
	if err != nil {
		return err
	}
	evictor := newSwitchEvictor(evict.NewCRIEvictor(w.stopper))
	dry, err := dryrun.New(st.podSpec.NodeName, w.reg)
	if err != nil {
		return err
	}
	n := &nodeParts{st: st, reg: w.reg, cgroups: w.cgroups, cpus: w.cpus, fe: w.fe, col: col, evictor: evictor, dry: dry,
		poolsChanged: w.policyDeps.PoolsChanged, poolsKick: w.poolsKick, beStarted: w.beStarted, vm: vm, vmWhy: vmWhy}
	comps, err := n.components(ctx, w.cons)
	if err != nil {
		return err
	}
	facts := nodeFacts{cgroups: w.cgroups, resctrl: w.rdt != nil, yield: canYield, policies: st.policy.Enabled, vm: vm, vmWhy: vmWhy, runQueue: st.runQueue}
	if err := w.endpoints(ctx, facts, n); err != nil {
		return err
	}
	for _, c := range comps {
		w.cons.add(ctx, c)
		c.Start(ctx, w.loops)
	}
	w.loops.Go("heap-release", heaprelease.New(st.heapRelease).Run)
	// API access comes when it can: the CRI socket never waits for it.
	w.loops.Once("connect-api", func(ctx context.Context) error {
		if client := connectAPI(ctx, st.podSpec.Kubeconfig, st.podSpec.NodeName, st.apiRetry); client != nil {
			startAPI(ctx, w.loops, client, w.cons, evictor, w.fileSource, n)
		}
		return nil
	})
	return nil
}

// endpoints serves /metrics and health on --metrics-addr, and the debug socket to root.
func (w *wiring) endpoints(ctx context.Context, facts nodeFacts, n *nodeParts) error {
	logger, st := klog.FromContext(ctx), w.st
	if st.metricsAddr != "" {
		var lc net.ListenConfig
		mlis, err := lc.Listen(ctx, "tcp", st.metricsAddr)
		if err != nil {
			return fmt.Errorf("listen on --metrics-addr %s (choose a free address, or empty to disable): %w", st.metricsAddr, err)
		}
		logger.Info("Serving metrics and health", "addr", mlis.Addr().String())
		w.closers = append(w.closers, serveHTTP(ctx, mlis, metricsMux(w.fe, w.reg, w.loops)))
	}
	dlis, err := listenDebug(ctx, st.debugSocket)
	if err != nil {
		return err
	}
	logger.Info("Serving the debug endpoints to root", "socket", st.debugSocket)
	dmux := debugMux(w.fe, w.cpus)
	dmux.Handle("/debug/config", configHandler(st.podSpec.NodeName, w.cons, facts))
	dmux.Handle("/debug/headroom", statusHandler(func() any { return n.hr.Status() }))
	dmux.Handle("/debug/interference", statusHandler(func() any { return n.lw.Status() }))
	dmux.Handle("/debug/capacity", statusHandler(func() any {
		if r := n.reporter.Load(); r != nil {
			return r.CapacityStatus()
		}
		return reporter.CapacityStatus{Node: st.podSpec.NodeName, Why: "the node reporter has not started: the API server has not answered yet"}
	}))
	w.closers = append(w.closers, serveHTTP(ctx, dlis, dmux))
	return nil
}

// startAPI starts what needs the API server, once it answers: this node's pod specs for the policies,
// evictions through the Eviction API, the node reporter and, without a file, the slo-controller-config
// ConfigMap.
func startAPI(ctx context.Context, loops *supervise.Group, client *kubeclient.Client, cons *consumers, evictor *switchEvictor,
	fileSource *source.Source, n *nodeParts) {
	logger := klog.FromContext(ctx)
	st, col, fe := n.st, n.col, n.fe
	if pods, err := podspec.NewForClient(client, st.podSpec); err != nil {
		logger.Error(err, "Pod specs not read; batch resources come from annotations only")
	} else {
		loops.Go("pod-specs", func(ctx context.Context) error { pods.Run(ctx); return nil })
		cons.setPodSpecs(ctx, func(d *policy.Deps) { d.BatchResources, d.MemoryRequests = pods, pods })
	}
	evictor.set(evict.NewAPIEvictor(client, st.podSpec.NodeName))
	n.dry.SetSink(client)
	switch {
	case fileSource != nil:
		fileSource.SetClient(client)
	case st.sloConfigMap != "":
		src, err := source.New(source.Config{ConfigMap: st.sloConfigMap, NodeName: st.podSpec.NodeName},
			source.Deps{Client: client, Apply: cons.apply})
		if err != nil {
			logger.Error(err, "slo-controller-config not followed; Koordinator's defaults apply")
			// The reporter must not wait for a configuration that will never come.
			cons.releaseFirst()
		} else {
			loops.Go("slo-configmap", src.Run)
		}
	}
	rep, err := reporter.New(reporter.Config{NodeName: st.podSpec.NodeName}, reporter.Deps{
		Client: client, Samples: reporter.SamplesFrom(col), Requests: podRequests(fe.Store(), st.policy.QoS.StaticCPUManager),
		Settings: func() slo.ColocationSettings { return st.colocation.Load().Colocation }, Registerer: n.reg,
		BECeiling: lowestCeiling(n.hr, n.lw), Window: n.windows.State, ClockOffset: client.ClockOffset,
	})
	if err != nil {
		logger.Error(err, "Node reporter not started")
		return
	}
	n.reporter.Store(rep)
	loops.Go("reporter", func(ctx context.Context) error {
		// Publish only what the operator's configuration says (see consumers.firstApplied). A node with
		// neither a file nor a ConfigMap has its defaults from the start.
		if fileSource != nil || st.sloConfigMap != "" {
			select {
			case <-cons.firstApplied:
			case <-ctx.Done():
				return nil
			}
		}
		return rep.Run(ctx)
	})
}

// collectorConfig starts the collectors at their default pace (usage every second); the consumers switch
// usage sampling to suppressInterval while resource-threshold-config is enabled and back when it is not.
func collectorConfig(st settings) collector.Config {
	c := collector.DefaultConfig()
	c.NodeName = st.podSpec.NodeName
	c.RunQueue.Enabled = st.runQueue
	if st.runQueueInterval > 0 {
		c.RunQueue.Interval = st.runQueueInterval
	}
	c.TracefsRoot = collector.FindTracefs(func(p string) bool { _, err := os.Stat(p); return err == nil })
	return c
}

// restoreExclusive gives the recovered containers their exclusive CPUs back; a nil allocator (no
// topology) restores nothing.
func restoreExclusive(ctx context.Context, cpus *alloc.Allocator, snap *store.Snapshot) int {
	if cpus == nil {
		return 0
	}
	return cpuset.Restore(ctx, cpus, recordedCPUs(snap))
}

// recordedCPUs lists the exclusive cpusets live containers hold, from the store the proxy rebuilt.
func recordedCPUs(snap *store.Snapshot) []cpuset.Recorded {
	pods := map[string]*store.Pod{}
	for _, p := range snap.Pods {
		pods[p.ID] = p
	}
	var out []cpuset.Recorded
	for _, c := range snap.Containers {
		class := qos.Class(&hooks.PodInfo{}, &hooks.ContainerInfo{Annotations: c.Annotations})
		if !class.Exclusive() || c.Resources == nil || c.Resources.CpusetCpus == "" || c.State == store.ContainerExited {
			continue
		}
		p, ok := pods[c.PodSandboxID]
		if !ok {
			continue
		}
		out = append(out, cpuset.Recorded{PodUID: p.UID, Container: c.Name, ContainerID: c.ID, Class: class, CPUs: c.Resources.CpusetCpus})
	}
	return out
}
