package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

// Inside the pods: where the agent binary and the results directory are mounted.
const (
	agentMount = "/coloc"
	outMount   = "/out"
)

// lsShares is kubelet's cpu.shares for a 500m request, the LS pods' size.
const lsShares = 512

// beSpec is a BE pod's batch resources as Koordinator's scheduler writes them: 500m requested, one
// CPU the limit (a spinning shell is one thread, so the limit never binds by itself).
const beSpec = `{"containers":{"c0":{"requests":{"kubernetes.io/batch-cpu":"500"},"limits":{"kubernetes.io/batch-cpu":"1k"}}}}`

// beContainer is a BE pod's container: the -antagonist, the CPU one a shell, the others this binary.
func (b *bench) beContainer(agentMounts []*runtimeapi.Mount) *runtimeapi.ContainerConfig {
	if b.o.antagonist == antagonistCPU {
		return b.container("c0", 2, nil, spinCommand...)
	}
	return b.container("c0", 2, agentMounts, agentMount+"/coloc", "antagonist", b.o.antagonist)
}

// spinCommand spins one CPU and exits at once on SIGTERM.
var spinCommand = []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do :; done"}

type bench struct {
	o        options
	dir      string // the run's private directory
	root     string // the private cgroup root, kubelet's cgroupRoot for these pods
	agent    string // the static agent binary, host path
	proxyBin string
	// proxyPID is the running setting's tandem-proxy, 0 without one: its CPU is measured per cell.
	proxyPID int
	ctrd     *framework.Containerd
	direct   internalapi.RuntimeService
	addr     string // the LS service's address (host network)
	rep      report
}

// pod is a pod the bench created and must remove.
type pod struct {
	id, parent string
}

func runBench(ctx context.Context, o options) (retErr error) {
	if err := o.validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	stopCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	}
	if err := framework.EnsureDebianPackages(ctx); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(o.workDir, "tc")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	b := &bench{o: o, dir: dir, root: fmt.Sprintf("/tdm-coloc-%d", os.Getpid())}
	keepDir := false
	defer func() {
		if err := podcgroup.RemoveTree(b.root); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("%w: remove them by hand (rmdir, deepest first)", err))
		}
		// With a mount left behind by a containerd that did not stop cleanly, removing the dir
		// would reach into a container's rootfs: keep it.
		if keepDir {
			logger.Info("Work dir kept for inspection", "dir", dir)
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("remove work dir: %w", err))
		}
	}()

	if slices.Contains(o.settings, settingLSWait) {
		unmount, err := ensureTracefs(ctx)
		if err != nil {
			return err
		}
		defer func() { retErr = errors.Join(retErr, unmount()) }()
	}

	logger.Info("Building the agent and tandem-proxy")
	// The agent runs inside the busybox test image: static, as framework builds Tandem's commands.
	if b.agent, err = framework.BuildPackage(ctx, filepath.Join(dir, "bin"), "./bench/colocation", "coloc"); err != nil {
		return err
	}
	b.proxyBin = o.proxyBinary
	if b.proxyBin == "" {
		if b.proxyBin, err = framework.BuildProxy(ctx, filepath.Join(dir, "bin")); err != nil {
			return err
		}
	}
	if b.addr, err = freeAddr(); err != nil {
		return err
	}

	logger.Info("Starting containerd", "flavor", o.flavor)
	keepDir = true
	b.ctrd, err = framework.StartContainerd(ctx, framework.ContainerdOptions{Flavor: o.flavor, Dir: filepath.Join(dir, "c")})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := stopCtx()
		defer cancel()
		if err := b.ctrd.Stop(cctx); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("stop containerd: %w", err))
			return
		}
		keepDir = false
	}()
	direct, images, err := framework.NewCRIClients(ctx, b.ctrd.Endpoint)
	if err != nil {
		return err
	}
	b.direct = direct
	if o.ls == lsNginx {
		logger.Info("Building and importing the nginx image")
		if err := b.importNginx(ctx); err != nil {
			return err
		}
	}
	defer func() {
		cctx, cancel := stopCtx()
		defer cancel()
		_ = direct.Close(cctx)
		_ = images.Close(cctx)
	}()
	if err := makeQoSParents(b.root); err != nil {
		return err
	}
	return b.measureRounds(ctx)
}

// freeAddr is a free TCP address on 127.0.0.1, for the LS service on the host network.
func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// makeQoSParents makes the QoS parents as kubelet sets them: kubepods weighs the node's capacity (1024
// shares per CPU) against the processes outside it, BestEffort gets the minimum weight, Burstable the
// sum of its pods' requests (the two LS pods). The private root gets kubepods' weight too, so that it
// stands where kubelet's / would: one level up, not a weight of its own.
func makeQoSParents(root string) error {
	capShares := int64(runtime.NumCPU()) * 1024
	for _, c := range []struct {
		path   string
		shares int64
	}{{root, capShares}, {root + "/kubepods", capShares}, {root + "/kubepods/besteffort", 2}, {root + "/kubepods/burstable", 2 * lsShares}} {
		if err := podcgroup.Make(c.path, c.shares); err != nil {
			return err
		}
	}
	return nil
}

// measureRounds measures every setting in every round, each round starting one setting further on,
// and prints (and writes, with -json) the report.
func (b *bench) measureRounds(ctx context.Context) error {
	o, logger := b.o, klog.FromContext(ctx)
	b.rep = report{
		Date: time.Now().UTC(), Flavor: o.flavor, Capacity: float64(runtime.NumCPU()),
		Duration: o.duration.String(), Rounds: o.rounds,
		WorkUs: float64(o.work) / float64(time.Microsecond), TouchBytes: o.touch, Antagonist: o.antagonist, LS: o.ls, HostCgroup: podcgroup.Own(),
	}
	for r := 1; r <= o.rounds; r++ {
		for i := range o.settings {
			s := o.settings[(i+r-1)%len(o.settings)]
			logger.Info("Measuring", "round", r, "setting", s)
			if err := b.runSetting(ctx, r, s); err != nil {
				return fmt.Errorf("round %d, %s: %w", r, s, err)
			}
		}
	}
	relate(b.rep.Cells, b.rep.PodStarts, b.rep.Capacity)
	b.rep.Load = figures.LoadAverage()
	m := figures.ReadMachine()
	b.rep.Machine = &m
	writeTables(os.Stdout, b.rep)
	if o.jsonPath != "" {
		if err := figures.WriteJSON(o.jsonPath, b.rep); err != nil {
			return err
		}
	}
	return nil
}

// cleanupCtx is a deadline of its own for one cleanup, from when it starts: a setting whose cells are
// measured again for steal can take longer than any deadline set at its start.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
}

// runSetting measures one setting in one round: both loads in the pod view, the host view, and the
// pod starts. Everything it creates is removed before it returns.
func (b *bench) runSetting(ctx context.Context, round int, setting string) (retErr error) {
	rs := b.direct
	if setting != settingSolo && setting != settingPlain {
		viaProxy, stop, err := b.startProxy(ctx, round, setting)
		if err != nil {
			return err
		}
		// After the pods are gone (defers run last-in first-out).
		defer func() { retErr = errors.Join(retErr, stop()) }()
		rs = viaProxy
	}
	var pods []pod
	defer func() {
		for _, p := range pods {
			cctx, cancel := cleanupCtx(ctx)
			retErr = errors.Join(retErr, b.removePod(cctx, p))
			cancel()
		}
	}()
	out := filepath.Join(b.dir, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	agentMounts := []*runtimeapi.Mount{
		{ContainerPath: agentMount, HostPath: filepath.Dir(b.agent), Readonly: true},
		{ContainerPath: outMount, HostPath: out},
	}
	server, err := b.startServer(ctx, rs, agentMounts, &pods)
	if err != nil {
		return err
	}
	client, clientCfg, err := b.runPod(ctx, rs, "ls-client", "LS", nil, nil)
	if client.id != "" {
		pods = append(pods, client)
	}
	if err != nil {
		return err
	}
	var be []string
	if setting != settingSolo {
		if be, err = b.startBE(ctx, rs, agentMounts, &pods); err != nil {
			return err
		}
	}
	podView := func(c *cell) error { return b.measurePod(ctx, rs, c, client, clientCfg, server, be, agentMounts, out) }
	hostView := func(c *cell) error { return b.measureHost(ctx, c, server, be, out) }
	if err := b.measureCells(ctx, round, setting, podView, hostView); err != nil {
		return err
	}
	return b.measurePodStarts(ctx, rs, round, setting)
}

// startProxy starts tandem-proxy with a Tandem setting in front of containerd and returns a CRI client
// through it, and what stops both.
func (b *bench) startProxy(ctx context.Context, round int, setting string) (internalapi.RuntimeService, func() error, error) {
	pdir := filepath.Join(b.dir, fmt.Sprintf("p%d%s", round, setting))
	// The slo-config in a directory of its own: tandem-proxy rereads it whenever its directory
	// changes, and the proxy's own log in the same directory would make that every 200 ms.
	for _, d := range []string{"hooks", "slo"} {
		if err := os.MkdirAll(filepath.Join(pdir, d), 0o755); err != nil {
			return nil, nil, err
		}
	}
	slo := filepath.Join(pdir, "slo", "slo.yaml")
	if err := os.WriteFile(slo, []byte(sloConfig(setting, b.o.suppressThreshold)), 0o644); err != nil {
		return nil, nil, fmt.Errorf("write slo-config: %w", err)
	}
	p, err := framework.StartProxy(ctx, framework.ProxyOptions{
		Binary: b.proxyBin, RuntimeEndpoint: b.ctrd.Endpoint, Dir: pdir,
		ExtraArgs: append([]string{"--slo-config", slo, "--kubelet-cgroup-root", b.root,
			"--hooks-dir", filepath.Join(pdir, "hooks"), "--node-name", "coloc-bench"}, proxyArgs(setting)...),
	})
	if err != nil {
		return nil, nil, err
	}
	b.proxyPID = p.PID()
	stopProxy := func() error {
		b.proxyPID = 0
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		if setting == settingLSWait {
			logGuard(cctx, p, round)
		}
		if code, err := p.Stop(cctx); err != nil || code != 0 {
			return fmt.Errorf("stop tandem-proxy (exit %d, log %s): %w", code, p.LogPath, err)
		}
		return nil
	}
	viaProxy, images, err := framework.NewCRIClients(ctx, p.Endpoint)
	if err != nil {
		return nil, nil, errors.Join(err, stopProxy())
	}
	return viaProxy, func() error {
		cctx, cancel := cleanupCtx(ctx)
		_ = viaProxy.Close(cctx)
		_ = images.Close(cctx)
		cancel()
		return stopProxy()
	}, nil
}

// startServer starts the LS service's pod and waits until it serves.
func (b *bench) startServer(ctx context.Context, rs internalapi.RuntimeService, agentMounts []*runtimeapi.Mount, pods *[]pod) (pod, error) {
	var serverCtr *runtimeapi.ContainerConfig
	if b.o.ls == lsNginx {
		serverCtr = b.container("server", lsShares, nil, nginxCommand()...)
		serverCtr.Image = &runtimeapi.ImageSpec{Image: nginxImage, UserSpecifiedImage: nginxImage}
	} else {
		serverCtr = b.container("server", lsShares, agentMounts, agentMount+"/coloc", "serve", "--addr", b.addr, "--work", b.o.work.String(), "--touch", strconv.Itoa(b.o.touch))
	}
	server, _, err := b.runPod(ctx, rs, "ls-server", "LS", []*runtimeapi.ContainerConfig{serverCtr}, nil)
	if server.id != "" {
		*pods = append(*pods, server)
	}
	if err != nil {
		return server, err
	}
	return server, waitServing(ctx, "http://"+b.addr+"/", 30*time.Second)
}

// startBE starts the BE antagonists' pods, lets them settle, and returns their cgroups.
func (b *bench) startBE(ctx context.Context, rs internalapi.RuntimeService, agentMounts []*runtimeapi.Mount, pods *[]pod) ([]string, error) {
	var be []string
	for i := range b.o.be {
		p, _, err := b.runPod(ctx, rs, fmt.Sprintf("be-%d", i), "BE", []*runtimeapi.ContainerConfig{
			b.beContainer(agentMounts),
		}, map[string]string{"node.koordinator.sh/extended-resource-spec": beSpec})
		if p.id != "" {
			*pods = append(*pods, p)
			be = append(be, p.parent)
		}
		if err != nil {
			return be, err
		}
	}
	return be, runctx.Sleep(ctx, b.o.settle)
}

// measureCells measures the pod view at both loads (the heavy one first in even rounds) and the host
// view.
func (b *bench) measureCells(ctx context.Context, round int, setting string, podView, hostView func(*cell) error) error {
	rates := []float64{b.o.light, b.o.heavy}
	if round%2 == 0 {
		rates[0], rates[1] = rates[1], rates[0]
	}
	if b.o.hostOnly {
		rates = nil
	}
	for _, rate := range rates {
		c, err := b.measure(ctx, cell{Round: round, View: viewPod, Rate: rate, Setting: setting}, podView)
		if err != nil {
			return err
		}
		b.rep.Cells = append(b.rep.Cells, c)
	}
	if b.o.hostRate > 0 {
		c, err := b.measure(ctx, cell{Round: round, View: viewHost, Rate: b.o.hostRate, Setting: setting}, hostView)
		if err != nil {
			return err
		}
		b.rep.Cells = append(b.rep.Cells, c)
	}
	return nil
}

// measurePodStarts times -pod-starts pod starts, each removed before the next.
func (b *bench) measurePodStarts(ctx context.Context, rs internalapi.RuntimeService, round int, setting string) error {
	if b.o.podStarts <= 0 {
		return nil
	}
	ps := podStarts{Round: round, Setting: setting}
	for i := range b.o.podStarts {
		start := time.Now()
		p, _, err := b.runPod(ctx, rs, fmt.Sprintf("start-%d", i), "LS", []*runtimeapi.ContainerConfig{
			b.container("c0", 102, nil, framework.SleepCommand()...),
		}, nil)
		took := time.Since(start)
		if p.id != "" {
			cctx, cancel := cleanupCtx(ctx)
			rerr := b.removePod(cctx, p)
			cancel()
			if rerr != nil {
				return errors.Join(err, rerr)
			}
		}
		if err != nil {
			return err
		}
		ps.Ms = append(ps.Ms, float64(took)/float64(time.Millisecond))
	}
	summarize(&ps)
	b.rep.PodStarts = append(b.rep.PodStarts, ps)
	return nil
}

// measure runs one cell, and again while the hypervisor took more than -max-steal of the machine's
// CPU during it (up to -steal-retries more times). On a virtual machine whose host is busy, the guest
// loses its CPUs for tens of milliseconds at a time (steal time), which no scheduling inside the
// guest can prevent; one such stall decides a p99.9. The cell keeps its steal and attempts, and the
// tables print them, so that a run on a noisy host says so.
func (b *bench) measure(ctx context.Context, c cell, run func(*cell) error) (cell, error) {
	for attempt := 1; ; attempt++ {
		try := c
		try.Attempts = attempt
		if err := run(&try); err != nil {
			return try, err
		}
		if try.StealMs <= float64(b.o.maxSteal)/float64(time.Millisecond) || attempt > b.o.stealRetries {
			return try, nil
		}
		klog.FromContext(ctx).Info("The hypervisor took CPU time during the cell; measuring it again",
			"view", c.View, "rate", c.Rate, "setting", c.Setting, "round", c.Round, "stealMs", try.StealMs, "attempt", attempt)
	}
}

// container is a container of the test image with kubelet's settings for a request of shares.
func (b *bench) container(name string, shares int64, mounts []*runtimeapi.Mount, cmd ...string) *runtimeapi.ContainerConfig {
	c := framework.ContainerConfig(name, cmd...)
	c.Mounts = mounts
	c.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: shares, CpuPeriod: 100000, OomScoreAdj: 1000}
	return c
}

// runPod creates a pod as kubelet does: its cgroup first (LS pods Burstable with lsShares, BE pods
// BestEffort), then the sandbox with the class's Koordinator label, then each container. It returns
// what it created even on error, for clean-up.
func (b *bench) runPod(ctx context.Context, rs internalapi.RuntimeService, name, class string, ctrs []*runtimeapi.ContainerConfig, annotations map[string]string) (pod, *runtimeapi.PodSandboxConfig, error) {
	cfg := framework.PodSandboxConfig(name, "coloc", true)
	qos, shares := "burstable", int64(lsShares)
	if class == "BE" {
		qos, shares = "besteffort", 2
	}
	p := pod{parent: fmt.Sprintf("%s/kubepods/%s/pod%s", b.root, qos, cfg.Metadata.Uid)}
	if err := podcgroup.Make(p.parent, shares); err != nil {
		return p, nil, err
	}
	cfg.Linux.CgroupParent = p.parent
	cfg.Labels["koordinator.sh/qosClass"] = class
	for k, v := range annotations {
		cfg.Annotations[k] = v
	}
	id, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		return p, nil, fmt.Errorf("run pod %s: %w", name, err)
	}
	p.id = id
	for _, c := range ctrs {
		cid, err := rs.CreateContainer(ctx, id, c, cfg)
		if err != nil {
			return p, cfg, fmt.Errorf("create container %s of pod %s: %w", c.Metadata.Name, name, err)
		}
		if err := rs.StartContainer(ctx, cid); err != nil {
			return p, cfg, fmt.Errorf("start container %s of pod %s: %w", c.Metadata.Name, name, err)
		}
	}
	return p, cfg, nil
}

// removePod removes a pod through the runtime directly (whatever endpoint made it) and its cgroup.
func (b *bench) removePod(ctx context.Context, p pod) error {
	var errs []error
	if p.id != "" {
		errs = append(errs, framework.RemovePod(ctx, b.direct, p.id))
	}
	errs = append(errs, podcgroup.RemoveTree(p.parent))
	return errors.Join(errs...)
}

// measurePod runs one load-client container in the client pod at c.Rate and fills c.
func (b *bench) measurePod(ctx context.Context, rs internalapi.RuntimeService, c *cell, client pod, cfg *runtimeapi.PodSandboxConfig, server pod, be []string, mounts []*runtimeapi.Mount, out string) error {
	name := fmt.Sprintf("r%d-%s-%s-%.0f", c.Round, c.View, c.Setting, c.Rate)
	ctr := b.container("load-"+strconv.Itoa(int(c.Rate)), lsShares, mounts, b.loadArgs(agentMount+"/coloc", c.Rate, outMount+"/"+name+".json")...)
	id, err := rs.CreateContainer(ctx, client.id, ctr, cfg)
	if err != nil {
		return fmt.Errorf("create the load client: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = b.direct.RemoveContainer(cctx, id)
	}()
	w, err := startWindow(be, []string{server.parent, client.parent}, b.proxyPID)
	if err != nil {
		return err
	}
	defer w.stop()
	if err := rs.StartContainer(ctx, id); err != nil {
		return fmt.Errorf("start the load client: %w", err)
	}
	if err := waitExited(ctx, b.direct, id, b.o.warmup+b.o.duration+time.Minute); err != nil {
		return err
	}
	st, err := w.end(c, 0)
	if err != nil {
		return err
	}
	return readResult(filepath.Join(out, name+".json"), c, st)
}

// measureHost runs the load client as a process of the bench's own cgroup and fills c.
func (b *bench) measureHost(ctx context.Context, c *cell, server pod, be []string, out string) error {
	file := filepath.Join(out, fmt.Sprintf("r%d-%s-%s-%.0f.json", c.Round, c.View, c.Setting, c.Rate))
	cmd := exec.CommandContext(ctx, b.agent, b.loadArgs("", c.Rate, file)[1:]...)
	w, err := startWindow(be, []string{server.parent}, b.proxyPID)
	if err != nil {
		return err
	}
	defer w.stop()
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("host load client: %w: %s", err, o)
	}
	var r loadResult
	if err := readJSON(file, &r); err != nil {
		return err
	}
	st, err := w.end(c, time.Duration(r.CPUSeconds*float64(time.Second)))
	if err != nil {
		return err
	}
	fillCell(c, r, st)
	return nil
}

func (b *bench) loadArgs(bin string, rate float64, out string) []string {
	return []string{bin, "load", "--url", "http://" + b.addr + "/", "--rate", strconv.FormatFloat(rate, 'f', -1, 64),
		"--warmup", b.o.warmup.String(), "--duration", b.o.duration.String(), "--out", out}
}
