package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/podcgroup"
	"github.com/tandemkit/tandem/bench/internal/procstat"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

// The three ways kubelet can reach containerd.
const (
	pathNone  = "none"
	pathProxy = "proxy"
	pathNRI   = "nri"
)

func allPaths() []string { return []string{pathNone, pathProxy, pathNRI} }

// path is one way of reaching containerd, with a containerd of its own.
//
// Why one containerd per path: NRI plugins attach to a containerd, not to a client, so none and nri
// cannot share one (with the plugin connected every caller's CreateContainer goes through it). proxy
// could share none's, but then that containerd would hold twice the containers and serve two paths'
// calls, and tandem-proxy's node loops (collectors, resync) would read none's containers too: three
// daemons of one config, each with the same pods and the same containers, differ in nothing but the path.
//
// Why NRI is enabled on all three: containerd 2 enables it by default, so a node without Tandem runs
// with it on, and with no plugin connected containerd still builds the NRI view of every pod and
// container on each call. So none is what a containerd 2 node pays today, and nri − none is what the
// plugin adds, not the plugin plus NRI being switched on.
type path struct {
	name   string
	ctrd   *framework.Containerd
	tandem *framework.Proxy // tandem-proxy or tandem-nri; nil for none
	// rs is what kubelet talks to: containerd's CRI socket for none and nri, tandem-proxy's for proxy.
	rs internalapi.RuntimeService
	// root is the path's private cgroup root (kubelet's cgroupRoot): Tandem manages the BE parent
	// below it, and two instances must not manage the same one.
	root string
	pods []*pod // in podClasses order
}

// tandemName is the Tandem binary the path runs.
func (p *path) tandemName() string {
	if p.name == pathNRI {
		return "tandem-nri"
	}
	return "tandem-proxy"
}

// dirLetter keeps the per-path directories short (unix socket paths live in them) and distinct.
func dirLetter(p string) string {
	return map[string]string{pathNone: "0", pathProxy: "p", pathNRI: "i"}[p]
}

func run(ctx context.Context, o options) (retErr error) {
	if err := o.validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	if err := framework.EnsureDebianPackages(ctx); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(o.workDir, "nl")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	// The dir is removed only when every containerd stopped cleanly: with a mount left behind, removing
	// it would reach into a container's rootfs. After a failure (not a Ctrl-C) the logs are kept.
	stoppedClean := true
	defer func() {
		if !stoppedClean || o.keep || (retErr != nil && ctx.Err() == nil) {
			logger.Info("Work dir kept for inspection", "dir", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("remove work dir: %w", err))
		}
	}()
	builds := startBuilds(ctx, o, filepath.Join(dir, "bin"))

	// Every path's cgroups live under one private root, so the host's /kubepods is never touched.
	base := fmt.Sprintf("/tdm-nrilat-%d", os.Getpid())
	var cleanups runctx.Cleanups
	// First added, so it runs after the containerds have removed their pods.
	cleanups.Add(func(context.Context) error { return podcgroup.RemoveTree(base) })
	defer func() { retErr = errors.Join(retErr, cleanups.Run(ctx)) }()
	if err := podcgroup.Make(base, int64(runtime.NumCPU())*1024); err != nil {
		return err
	}
	seed := o.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	paths, startOrder, err := startContainerds(ctx, o, dir, base, seed, &cleanups, &stoppedClean)
	if err != nil {
		return err
	}
	b := <-builds
	if b.err != nil {
		return b.err
	}
	if err := startTandems(ctx, o, dir, paths, b, &cleanups); err != nil {
		return err
	}
	v, err := paths[0].rs.Version(ctx, "0.1.0")
	if err != nil {
		return fmt.Errorf("path %s: Version: %w", paths[0].name, err)
	}
	for _, p := range paths {
		// The pods go through their own path too, before Tandem stops, as kubelet removes them: tandem-nri
		// then sees its StopPodSandbox and RemovePodSandbox events instead of containerd finding it gone.
		cleanups.Add(func(ctx context.Context) error { return removePods(ctx, p) })
		if err := startPods(ctx, p, dir, o.perPod); err != nil {
			return err
		}
		if err := checkStore(ctx, p); err != nil {
			return err
		}
	}
	logger.Info("Pods running", "paths", o.paths)
	rep := &report{machine: figures.ReadMachine(), runtime: v.GetRuntimeName() + " " + v.GetRuntimeVersion(), opts: o, seed: seed,
		paths: o.paths, startOrder: startOrder, perPath: o.rounds * 2 * o.perPod}
	if err := measure(ctx, paths, o, rep); err != nil {
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

// built is where tandem-proxy and tandem-nri were built, or why not.
type built struct {
	proxy, nri string
	err        error
}

// startBuilds builds tandem-proxy and tandem-nri while the containerds start; containerd 2.4.2 itself
// is built once and cached, which takes minutes the first time.
func startBuilds(ctx context.Context, o options, dir string) <-chan built {
	logger := klog.FromContext(ctx)
	done := make(chan built, 1)
	go func() {
		b := built{proxy: o.proxyBinary, nri: o.nriBinary}
		if slices.Contains(o.paths, pathProxy) && b.proxy == "" {
			logger.Info("Building tandem-proxy")
			b.proxy, b.err = framework.BuildProxy(ctx, dir)
		}
		if slices.Contains(o.paths, pathNRI) && b.nri == "" && b.err == nil {
			logger.Info("Building tandem-nri")
			b.nri, b.err = framework.BuildNRI(ctx, dir)
		}
		done <- b
	}()
	if !framework.ContainerdV2Cached() {
		logger.Info("Building containerd " + framework.ContainerdV2Version + " once (minutes on two CPUs)")
	}
	return done
}

// startContainerds makes each path's QoS parents and starts its containerd. The daemons start in an
// order drawn from the seed: in A/A runs the first one started was the fastest by up to 4 ms per
// container (of some 115), so a fixed order would always hand that to the same path.
func startContainerds(ctx context.Context, o options, dir, base string, seed uint64, cleanups *runctx.Cleanups, stoppedClean *bool) ([]*path, []string, error) {
	capShares := int64(runtime.NumCPU()) * 1024
	paths := make([]*path, len(o.paths))
	var startOrder []string
	for _, i := range rand.New(rand.NewPCG(seed, 0x6f72646572)).Perm(len(o.paths)) {
		name := o.paths[i]
		startOrder = append(startOrder, name)
		p := &path{name: name, root: base + "/" + name}
		paths[i] = p
		for _, c := range []struct {
			dir    string
			shares int64
		}{{p.root, capShares}, {p.root + "/kubepods", capShares}, {p.root + "/kubepods/besteffort", beShares}, {p.root + "/kubepods/burstable", int64(o.perPod) * lsShares}} {
			if err := podcgroup.Make(c.dir, c.shares); err != nil {
				return nil, nil, err
			}
		}
		cdir := filepath.Join(dir, dirLetter(name))
		klog.FromContext(ctx).Info("Starting containerd", "path", name, "version", framework.ContainerdV2Version)
		var err error
		p.ctrd, err = framework.StartContainerd(ctx, framework.ContainerdOptions{
			Flavor: framework.Flavor2, Dir: cdir, NRISocket: framework.NRISocketPath(cdir),
		})
		if err != nil {
			return nil, nil, fmt.Errorf("path %s: %w", name, err)
		}
		cleanups.Add(func(ctx context.Context) error {
			if err := p.ctrd.Stop(ctx); err != nil {
				*stoppedClean = false
				return fmt.Errorf("path %s: stop containerd: %w", name, err)
			}
			return nil
		})
	}
	return paths, startOrder, nil
}

// startTandems starts each path's Tandem (none has none; an A/A run none at all) and connects the
// path's CRI client, through Tandem where there is one.
func startTandems(ctx context.Context, o options, dir string, paths []*path, b built, cleanups *runctx.Cleanups) error {
	for _, p := range paths {
		endpoint := p.ctrd.Endpoint
		if p.name != pathNone && !o.aa {
			if err := startTandem(ctx, o, dir, p, b, cleanups); err != nil {
				return err
			}
			endpoint = p.tandem.Endpoint
		}
		rs, is, err := framework.NewCRIClients(ctx, endpoint)
		if err != nil {
			return err
		}
		p.rs = rs
		cleanups.Add(func(ctx context.Context) error {
			_ = rs.Close(ctx)
			_ = is.Close(ctx)
			return nil
		})
	}
	return nil
}

func startTandem(ctx context.Context, o options, dir string, p *path, b built, cleanups *runctx.Cleanups) error {
	opts := framework.ProxyOptions{
		Binary: b.proxy, RuntimeEndpoint: p.ctrd.Endpoint, Dir: filepath.Join(dir, "t"+dirLetter(p.name)),
		ExtraArgs: []string{"--kubelet-cgroup-root", p.root, "--hooks-dir", filepath.Join(dir, "hooks.d"),
			"--node-name", "nrilatency", "-v", strconv.Itoa(o.proxyVerbosity)},
	}
	if p.name == pathNRI {
		opts.Binary, opts.NRISocket = b.nri, p.ctrd.NRISocket
	}
	if err := os.MkdirAll(filepath.Join(dir, "hooks.d"), 0o755); err != nil {
		return fmt.Errorf("create hooks dir: %w", err)
	}
	klog.FromContext(ctx).Info("Starting "+p.tandemName(), "path", p.name)
	var err error
	if p.tandem, err = framework.StartProxy(ctx, opts); err != nil {
		return fmt.Errorf("path %s: %w", p.name, err)
	}
	// Before its containerd stops (cleanups run last added first).
	cleanups.Add(func(ctx context.Context) error {
		code, err := p.tandem.Stop(ctx)
		if err != nil {
			return fmt.Errorf("path %s: stop %s: %w", p.name, p.tandemName(), err)
		} else if code != 0 {
			return fmt.Errorf("path %s: %s exited with code %d on SIGTERM, want 0: see %s", p.name, p.tandemName(), code, p.tandem.LogPath)
		}
		return nil
	})
	return nil
}

// removePods removes the path's pods through the path.
func removePods(ctx context.Context, p *path) error {
	var errs []error
	for _, pd := range p.pods {
		if err := framework.RemovePod(ctx, p.rs, pd.id); err != nil {
			errs = append(errs, fmt.Errorf("path %s: %w", p.name, err))
		}
	}
	return errors.Join(errs...)
}

// idleTicks is the CPU each process uses at rest over d, with the pods running and no calls: its share
// of the rounds' CPU that no container start caused. Ticks are 10 ms, so d must be some seconds long.
func idleTicks(ctx context.Context, paths []*path, d time.Duration) (map[string]int64, error) {
	if d <= 0 {
		return nil, nil
	}
	klog.FromContext(ctx).Info("Measuring CPU at rest", "for", d)
	start, err := cpuTicks(paths)
	if err != nil {
		return nil, err
	}
	if err := runctx.Sleep(ctx, d); err != nil {
		return nil, err
	}
	end, err := cpuTicks(paths)
	if err != nil {
		return nil, err
	}
	idle := map[string]int64{}
	for k, v := range end {
		idle[k] = v - start[k]
	}
	return idle, nil
}

// measure runs the rounds, the warm-up ones untimed, and fills rep with the samples and each process's
// CPU: over the timed rounds, at rest, and as Tandem's own timings count it.
func measure(ctx context.Context, paths []*path, o options, rep *report) error {
	idle, err := idleTicks(ctx, paths, o.idle)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(rep.seed, rep.seed^0x6e726c61))
	var before map[string]int64
	timesBefore := map[string]tandemTimes{}
	var measureStart time.Time
	for r := range o.warmupRounds + o.rounds {
		timed := r >= o.warmupRounds
		if timed && before == nil {
			if before, timesBefore, err = readCPU(ctx, paths); err != nil {
				return err
			}
			measureStart = time.Now()
			rep.loadBefore = figures.LoadAverage()
		}
		outs, err := runOneRound(ctx, paths, o, r, rng)
		if err != nil {
			return fmt.Errorf("round %d: %w", r+1, err)
		}
		if timed {
			rep.maxFlight = max(rep.maxFlight, maxInFlight(outs))
			for _, out := range outs {
				rep.samples = append(rep.samples, newSample(out, paths[out.path].name, podClasses[out.block%len(podClasses)], r-o.warmupRounds))
				rep.maxLag = max(rep.maxLag, out.sent.Sub(out.due))
			}
		}
		if (r+1)%5 == 0 || r+1 == o.warmupRounds+o.rounds {
			klog.FromContext(ctx).Info("Progress", "rounds", r+1, "of", o.warmupRounds+o.rounds)
		}
	}
	rep.seconds = time.Since(measureStart).Seconds()
	rep.loadAfter = figures.LoadAverage()
	after, timesAfter, err := readCPU(ctx, paths)
	if err != nil {
		return err
	}
	for _, p := range paths {
		k := p.name + "/containerd"
		rep.cpu = append(rep.cpu, cpuUse{Path: p.name, Process: "containerd", Ticks: after[k] - before[k], IdleTicks: idle[k], IdleSeconds: o.idle.Seconds()})
	}
	rep.inside = map[string][]inside{}
	for _, p := range paths {
		if p.tandem != nil {
			k := p.name + "/tandem"
			rep.cpu = append(rep.cpu, cpuUse{Path: p.name, Process: p.tandemName(), Ticks: after[k] - before[k], IdleTicks: idle[k], IdleSeconds: o.idle.Seconds()})
			rep.inside[p.name] = insideTimes(timesBefore[p.name], timesAfter[p.name], rep.perPath)
		}
	}
	return nil
}

// readCPU reads every process's CPU ticks and every Tandem's own timings.
func readCPU(ctx context.Context, paths []*path) (map[string]int64, map[string]tandemTimes, error) {
	ticks, err := cpuTicks(paths)
	if err != nil {
		return nil, nil, err
	}
	times := map[string]tandemTimes{}
	for _, p := range paths {
		if p.tandem != nil {
			if times[p.name], err = readTandemTimes(ctx, p); err != nil {
				return nil, nil, err
			}
		}
	}
	return ticks, times, nil
}

// startPods runs the path's LS and BE pods through the path's own socket, as kubelet would: the pod's
// cgroup first, then RunPodSandbox.
func startPods(ctx context.Context, p *path, dir string, perPod int) error {
	for _, class := range podClasses {
		name := fmt.Sprintf("%s-%s", map[string]string{classLS: "web", classBE: "spark-exec"}[class], p.name)
		cfg := podConfig(name, class, p.root, perPod)
		pd := &pod{class: class, cfg: cfg, parent: cfg.Linux.CgroupParent, dir: filepath.Join(dir, "pods", p.name+"-"+class)}
		shares := int64(beShares)
		if class == classLS {
			shares = int64(perPod) * lsShares
		}
		if err := podcgroup.Make(pd.parent, shares); err != nil {
			return err
		}
		if err := preparePod(pd); err != nil {
			return err
		}
		id, err := p.rs.RunPodSandbox(ctx, cfg, "")
		if err != nil {
			return fmt.Errorf("path %s: run pod %s: %w", p.name, name, err)
		}
		pd.id = id
		p.pods = append(p.pods, pd)
	}
	return nil
}

// checkStore makes sure tandem-proxy or tandem-nri saw the pods: a path whose Tandem does not know them
// would be timed without its policies.
func checkStore(ctx context.Context, p *path) error {
	if p.tandem == nil {
		return nil
	}
	// In NRI mode the pods arrive by NRI events, which containerd may send after RunPodSandbox answers.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := p.tandem.Store(ctx)
		if err != nil {
			return fmt.Errorf("path %s: %w", p.name, err)
		}
		known := 0
		for _, sp := range st.Pods {
			for _, pd := range p.pods {
				if sp.ID == pd.id {
					known++
				}
			}
		}
		if known == len(p.pods) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("path %s: %s's store holds %d of the %d pods 10 s after they ran: see %s", p.name, p.tandemName(), known, len(p.pods), p.tandem.LogPath)
		}
		if err := runctx.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// runOneRound starts round r's containers on every path, open loop, then, untimed, checks them and stops
// and removes them through their own path. It returns the outcomes of the starts.
func runOneRound(ctx context.Context, paths []*path, o options, r int, rng *rand.Rand) ([]outcome, error) {
	slots := roundSlots(len(paths), len(podClasses)*o.perPod, o.rate, rng)
	// The configs are made before the round, as the files kubelet writes for a container are not part of
	// the CRI calls timed here.
	type key struct{ path, block int }
	cfgs := map[key]*containerCall{}
	for _, s := range slots {
		p := paths[s.path]
		pd := p.pods[s.block%len(podClasses)]
		cfg, err := containerConfig(pd, fmt.Sprintf("c%d", s.block/len(podClasses)), uint32(r))
		if err != nil {
			return nil, err
		}
		cfgs[key{s.path, s.block}] = &containerCall{p: p, pod: pd, cfg: cfg}
	}
	// A short lead, so that the first slot is not already late when the goroutines are set up.
	outs := runRound(ctx, slots, time.Now().Add(20*time.Millisecond), func(ctx context.Context, s slot, out *outcome) error {
		c := cfgs[key{s.path, s.block}]
		id, err := c.p.rs.CreateContainer(ctx, c.pod.id, c.cfg, c.pod.cfg)
		out.created = time.Now()
		if err != nil {
			return fmt.Errorf("path %s: CreateContainer %s in pod %s: %w", c.p.name, c.cfg.Metadata.Name, c.pod.cfg.Metadata.Name, err)
		}
		out.id = id
		err = c.p.rs.StartContainer(ctx, id)
		out.started = time.Now()
		if err != nil {
			return fmt.Errorf("path %s: StartContainer %s in pod %s: %w", c.p.name, c.cfg.Metadata.Name, c.pod.cfg.Metadata.Name, err)
		}
		return nil
	})
	var errs []error
	if len(outs) < len(slots) {
		errs = append(errs, ctx.Err())
	}
	for _, out := range outs {
		if out.err != nil {
			errs = append(errs, out.err)
			continue
		}
		if err := checkPolicies(paths[out.path], cfgs[key{out.path, out.block}].pod, out.id); err != nil {
			errs = append(errs, err)
		}
	}
	// Removed even after a failure, so that the next round (or the clean-up) finds the pods as before.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	for _, out := range outs {
		if out.id == "" {
			continue
		}
		p := paths[out.path]
		if err := p.rs.StopContainer(cctx, out.id, 30); err != nil {
			errs = append(errs, fmt.Errorf("path %s: stop container %s: %w", p.name, out.id, err))
		}
		if err := p.rs.RemoveContainer(cctx, out.id); err != nil {
			errs = append(errs, fmt.Errorf("path %s: remove container %s: %w", p.name, out.id, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return outs, runctx.Sleep(ctx, o.settle)
}

// containerCall is what one slot sends.
type containerCall struct {
	p   *path
	pod *pod
	cfg *runtimeapi.ContainerConfig
}

// checkPolicies makes sure a BE container got what the path should give it: the batch resources' CPU
// weight where Tandem runs (batchresource ran), kubelet's own where it does not (none, and every path of
// an A/A check).
func checkPolicies(p *path, pd *pod, id string) error {
	if pd.class != classBE {
		return nil
	}
	shares := int64(beBatchShares)
	if p.tandem == nil {
		shares = beShares
	}
	got, want, err := podcgroup.CPUWeight(pd.parent, id, shares)
	if err != nil {
		return fmt.Errorf("path %s: %w", p.name, err)
	}
	if got != want {
		return fmt.Errorf("path %s: BE container %s has CPU weight %d, want %d: its policies did not run as they should", p.name, id, got, want)
	}
	return nil
}

// cpuTicks reads the CPU time of every path's containerd and Tandem, keyed path/process.
func cpuTicks(paths []*path) (map[string]int64, error) {
	out := map[string]int64{}
	for _, p := range paths {
		t, err := procstat.CPUTicks(p.ctrd.PID())
		if err != nil {
			return nil, fmt.Errorf("path %s: containerd: %w", p.name, err)
		}
		out[p.name+"/containerd"] = t
		if p.tandem != nil {
			if t, err = procstat.CPUTicks(p.tandem.PID()); err != nil {
				return nil, fmt.Errorf("path %s: %s: %w", p.name, p.tandemName(), err)
			}
			out[p.name+"/tandem"] = t
		}
	}
	return out, nil
}
