package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/hostinfo"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/hooks/policy"
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
	cleanupCtx := func() (context.Context, context.CancelFunc) {
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
		if err := removeCgroupTree(b.root); err != nil {
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
	if b.agent, err = buildAgent(ctx, filepath.Join(dir, "bin")); err != nil {
		return err
	}
	b.proxyBin = o.proxyBinary
	if b.proxyBin == "" {
		if b.proxyBin, err = framework.BuildProxy(ctx, filepath.Join(dir, "bin")); err != nil {
			return err
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("find a free port: %w", err)
	}
	b.addr = lis.Addr().String()
	_ = lis.Close()

	logger.Info("Starting containerd", "flavor", o.flavor)
	keepDir = true
	b.ctrd, err = framework.StartContainerd(ctx, framework.ContainerdOptions{Flavor: o.flavor, Dir: filepath.Join(dir, "c")})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := cleanupCtx()
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
		cctx, cancel := cleanupCtx()
		defer cancel()
		_ = direct.Close(cctx)
		_ = images.Close(cctx)
	}()
	// The QoS parents as kubelet sets them: kubepods weighs the node's capacity (1024 shares per CPU)
	// against the processes outside it, BestEffort gets the minimum weight, Burstable the sum of its
	// pods' requests (the two LS pods). The private root gets kubepods' weight too, so that it stands
	// where kubelet's / would: one level up, not a weight of its own.
	capShares := int64(runtime.NumCPU()) * 1024
	if err := makeCgroup(b.root, capShares); err != nil {
		return err
	}
	if err := makeCgroup(b.root+"/kubepods", capShares); err != nil {
		return err
	}
	if err := makeCgroup(b.root+"/kubepods/besteffort", 2); err != nil {
		return err
	}
	if err := makeCgroup(b.root+"/kubepods/burstable", 2*lsShares); err != nil {
		return err
	}

	b.rep = report{
		Date: time.Now().UTC(), Flavor: o.flavor, Capacity: float64(runtime.NumCPU()),
		Duration: o.duration.String(), Rounds: o.rounds,
		WorkUs: float64(o.work) / float64(time.Microsecond), TouchBytes: o.touch, Antagonist: o.antagonist, LS: o.ls, HostCgroup: ownCgroup(),
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
	b.rep.Load = hostinfo.LoadAverage()
	writeTables(os.Stdout, b.rep)
	if o.jsonPath != "" {
		out, err := json.MarshalIndent(b.rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonPath, out, 0o644); err != nil {
			return fmt.Errorf("write -json: %w", err)
		}
	}
	return nil
}

// buildAgent builds this command static, to run inside the busybox test image.
func buildAgent(ctx context.Context, outDir string) (string, error) {
	root, err := framework.RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out := filepath.Join(outDir, "coloc")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", out, "./bench/colocation")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the agent (go build ./bench/colocation): %w: %s", err, b)
	}
	return out, nil
}

// sloConfig is the tandem-proxy --slo-config file of a Tandem setting.
func sloConfig(setting string, threshold int) string {
	s := "colocation-config: '{\"enable\": true}'\n"
	policy := map[string]string{settingCPUSet: "cpuset", settingCFSQuota: "cfsQuota", settingCFSQ100ms: "cfsQuota"}[setting]
	period := map[string]int{settingCFSQ100ms: 100000}[setting]
	switch {
	case period > 0:
		s += fmt.Sprintf("resource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": %d, \"cpuSuppressPolicy\": %q, \"beCFSPeriodMicros\": %d}}'\n", threshold, policy, period)
	case policy != "":
		s += fmt.Sprintf("resource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": %d, \"cpuSuppressPolicy\": %q}}'\n", threshold, policy)
	}
	if setting == settingYield {
		s += "resource-qos-config: '{\"clusterStrategy\": {\"beClass\": {\"cpuQOS\": {\"yieldThreads\": true}}}}'\n"
	}
	if setting == settingNoSteal {
		s += "resource-threshold-config: '{\"clusterStrategy\": {\"stealHeadroom\": \"off\"}}'\n"
	}
	if setting == settingLSWait {
		s += "resource-threshold-config: '{\"clusterStrategy\": {\"lsWaitGuard\": true}}'\n"
	}
	return s
}

// proxyArgs are the tandem-proxy flags a Tandem setting adds.
func proxyArgs(setting string) []string {
	if setting == settingLSWait {
		return []string{"--run-queue-latency", "--run-queue-interval=2s"}
	}
	if only, ok := strings.CutPrefix(setting, settingWith); ok {
		return []string{"--policies=" + strings.ReplaceAll(only, "+", ",")}
	}
	if drop, ok := withoutPolicy[setting]; ok {
		var keep []string
		for _, n := range policy.Names() {
			if !slices.Contains(drop, n) {
				keep = append(keep, n)
			}
		}
		return []string{"--policies=" + strings.Join(keep, ",")}
	}
	return nil
}

// ensureTracefs mounts tracefs where tandem-proxy's run-queue collector looks first when no tracefs
// with the sched tracepoints is mounted, and returns what undoes it (nothing, if the machine had it).
func ensureTracefs(ctx context.Context) (func() error, error) {
	for _, dir := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if _, err := os.Stat(dir + "/events/sched/sched_switch"); err == nil {
			return func() error { return nil }, nil
		}
	}
	const dir = "/sys/kernel/tracing"
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		return nil, fmt.Errorf("mount tracefs on %s for the tandem-lswait setting (or leave that setting out): %w", dir, err)
	}
	klog.FromContext(ctx).Info("Mounted tracefs for the run-queue collector; unmounted at the end", "dir", dir)
	return func() error {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmount the tracefs the bench mounted (umount %s by hand): %w", dir, err)
		}
		return nil
	}, nil
}

// logGuard logs what the LS wait guard did in a round, from tandem-proxy's metrics.
func logGuard(ctx context.Context, p *framework.Proxy, round int) {
	logger := klog.FromContext(ctx)
	text, err := p.Metrics(ctx)
	if err != nil {
		logger.Error(err, "LS wait guard's counters not read")
		return
	}
	kv := []any{"round", round}
	for _, name := range []string{"tandem_interference_holds_total", "tandem_interference_releases_total", "tandem_interference_raises_total"} {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				kv = append(kv, strings.TrimPrefix(strings.TrimSuffix(name, "_total"), "tandem_interference_"), v)
			}
		}
	}
	logger.Info("LS wait guard in this round", kv...)
}

// runSetting measures one setting in one round: both loads in the pod view, the host view, and the
// pod starts. Everything it creates is removed before it returns.
func (b *bench) runSetting(ctx context.Context, round int, setting string) (retErr error) {
	// Each cleanup gets its own deadline, from when it starts: a setting whose cells are measured
	// again for steal can take longer than any deadline set at its start.
	cleanupCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	}
	rs := b.direct
	if setting != settingSolo && setting != settingPlain {
		pdir := filepath.Join(b.dir, fmt.Sprintf("p%d%s", round, setting))
		// The slo-config in a directory of its own: tandem-proxy rereads it whenever its directory
		// changes, and the proxy's own log in the same directory would make that every 200 ms.
		for _, d := range []string{"hooks", "slo"} {
			if err := os.MkdirAll(filepath.Join(pdir, d), 0o755); err != nil {
				return err
			}
		}
		slo := filepath.Join(pdir, "slo", "slo.yaml")
		if err := os.WriteFile(slo, []byte(sloConfig(setting, b.o.suppressThreshold)), 0o644); err != nil {
			return fmt.Errorf("write slo-config: %w", err)
		}
		p, err := framework.StartProxy(ctx, framework.ProxyOptions{
			Binary: b.proxyBin, RuntimeEndpoint: b.ctrd.Endpoint, Dir: pdir,
			ExtraArgs: append([]string{"--slo-config", slo, "--kubelet-cgroup-root", b.root,
				"--hooks-dir", filepath.Join(pdir, "hooks"), "--node-name", "coloc-bench"}, proxyArgs(setting)...),
		})
		if err != nil {
			return err
		}
		b.proxyPID = p.PID()
		defer func() {
			b.proxyPID = 0
			// After the pods are gone (defers run last-in first-out).
			cctx, cancel := cleanupCtx()
			defer cancel()
			if setting == settingLSWait {
				logGuard(cctx, p, round)
			}
			if code, err := p.Stop(cctx); err != nil || code != 0 {
				retErr = errors.Join(retErr, fmt.Errorf("stop tandem-proxy (exit %d, log %s): %w", code, p.LogPath, err))
			}
		}()
		viaProxy, images, err := framework.NewCRIClients(ctx, p.Endpoint)
		if err != nil {
			return err
		}
		defer func() {
			cctx, cancel := cleanupCtx()
			defer cancel()
			_ = viaProxy.Close(cctx)
			_ = images.Close(cctx)
		}()
		rs = viaProxy
	}
	var pods []pod
	defer func() {
		for _, p := range pods {
			cctx, cancel := cleanupCtx()
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

	var serverCtr *runtimeapi.ContainerConfig
	if b.o.ls == lsNginx {
		serverCtr = b.container("server", lsShares, nil, nginxCommand()...)
		serverCtr.Image = &runtimeapi.ImageSpec{Image: nginxImage, UserSpecifiedImage: nginxImage}
	} else {
		serverCtr = b.container("server", lsShares, agentMounts, agentMount+"/coloc", "serve", "--addr", b.addr, "--work", b.o.work.String(), "--touch", strconv.Itoa(b.o.touch))
	}
	server, _, err := b.runPod(ctx, rs, "ls-server", "LS", []*runtimeapi.ContainerConfig{serverCtr}, nil)
	if server.id != "" {
		pods = append(pods, server)
	}
	if err != nil {
		return err
	}
	if err := waitServing(ctx, "http://"+b.addr+"/", 30*time.Second); err != nil {
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
		for i := range b.o.be {
			p, _, err := b.runPod(ctx, rs, fmt.Sprintf("be-%d", i), "BE", []*runtimeapi.ContainerConfig{
				b.beContainer(agentMounts),
			}, map[string]string{"node.koordinator.sh/extended-resource-spec": beSpec})
			if p.id != "" {
				pods = append(pods, p)
				be = append(be, p.parent)
			}
			if err != nil {
				return err
			}
		}
		if err := runctx.Sleep(ctx, b.o.settle); err != nil {
			return err
		}
	}

	rates := []float64{b.o.light, b.o.heavy}
	if round%2 == 0 {
		rates[0], rates[1] = rates[1], rates[0]
	}
	if b.o.hostOnly {
		rates = nil
	}
	for _, rate := range rates {
		c, err := b.measure(ctx, cell{Round: round, View: viewPod, Rate: rate, Setting: setting}, func(c *cell) error {
			return b.measurePod(ctx, rs, c, client, clientCfg, server, be, agentMounts, out)
		})
		if err != nil {
			return err
		}
		b.rep.Cells = append(b.rep.Cells, c)
	}
	if b.o.hostRate > 0 {
		c, err := b.measure(ctx, cell{Round: round, View: viewHost, Rate: b.o.hostRate, Setting: setting}, func(c *cell) error {
			return b.measureHost(ctx, c, server, be, out)
		})
		if err != nil {
			return err
		}
		b.rep.Cells = append(b.rep.Cells, c)
	}
	if b.o.podStarts > 0 {
		ps := podStarts{Round: round, Setting: setting}
		for i := range b.o.podStarts {
			start := time.Now()
			p, _, err := b.runPod(ctx, rs, fmt.Sprintf("start-%d", i), "LS", []*runtimeapi.ContainerConfig{
				b.container("c0", 102, nil, framework.SleepCommand()...),
			}, nil)
			took := time.Since(start)
			if p.id != "" {
				cctx, cancel := cleanupCtx()
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
	}
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
	if err := makeCgroup(p.parent, shares); err != nil {
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
	errs = append(errs, removeCgroupTree(p.parent))
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

// window is the CPU time of the BE and LS cgroups at a cell's start, and the steal sampler that
// runs through it.
type window struct {
	be, ls   []string
	beU, lsU time.Duration
	// proxy is tandem-proxy's pid (0 without one), proxyU its CPU time at the start.
	proxy   int
	proxyU  time.Duration
	steal   float64
	start   time.Time
	sampler *stealSampler
}

func startWindow(be, ls []string, proxy int) (*window, error) {
	w := &window{be: be, ls: ls, proxy: proxy, start: time.Now()}
	var err error
	if w.proxyU, err = processCPU(proxy); err != nil {
		return nil, err
	}
	if w.steal, err = stealSeconds(); err != nil {
		return nil, err
	}
	if w.beU, err = sumUsage(be); err != nil {
		return nil, err
	}
	if w.lsU, err = sumUsage(ls); err != nil {
		return nil, err
	}
	// Last, so that no error above leaves it running.
	if w.sampler, err = startStealSampler("/proc/stat", stealEvery); err != nil {
		return nil, err
	}
	return w, nil
}

// stop ends the steal sampler of a window that failed before its end; after end it does nothing.
func (w *window) stop() { _, _, _, _, _ = w.sampler.end() }

// end fills c's cores and steal over the window and returns its stalls, for fillCell; extraLS is LS
// CPU outside the LS cgroups (the host client).
func (w *window) end(c *cell, extraLS time.Duration) (stalls, error) {
	st, n, samplerCPU, gap, err := w.sampler.end()
	if err != nil {
		return nil, err
	}
	beU, err := sumUsage(w.be)
	if err != nil {
		return nil, err
	}
	lsU, err := sumUsage(w.ls)
	if err != nil {
		return nil, err
	}
	steal, err := stealSeconds()
	if err != nil {
		return nil, err
	}
	proxyU, err := processCPU(w.proxy)
	if err != nil {
		return nil, err
	}
	wall := time.Since(w.start).Seconds()
	c.ProxyCores = (proxyU - w.proxyU).Seconds() / wall
	// Rounded: the counter moves in 10 ms units, and 20 ms read as 20.000000000003 would exceed a
	// -max-steal of 20ms.
	c.StealMs = math.Round((steal - w.steal) * 1000)
	c.BECores = (beU - w.beU).Seconds() / wall
	c.LSCores = (lsU - w.lsU + extraLS).Seconds() / wall
	c.StealIntervals, c.SamplerCores, c.SampleMaxGapMs = n, samplerCPU.Seconds()/wall, float64(gap)/float64(time.Millisecond)
	return st, nil
}

// processCPU is the CPU time (user and system) process pid has used, 0 for pid 0. tandem-proxy is a
// process of the host, beside the host view's client: what it uses is the node agent's cost, and the
// host client competes with it.
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("find tandem-proxy (pid %d): %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("read tandem-proxy's CPU time: %w", err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second)), nil
}

// stealSeconds is the CPU time the hypervisor has taken from this machine's CPUs since boot (the
// steal column of /proc/stat), summed over the CPUs.
func stealSeconds() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, fmt.Errorf("open /proc: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	return st.CPUTotal.Steal, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the load client's result: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse the load client's result %s: %w", path, err)
	}
	return nil
}

func readResult(path string, c *cell, st stalls) error {
	var r loadResult
	if err := readJSON(path, &r); err != nil {
		return err
	}
	fillCell(c, r, st)
	return nil
}

// waitExited polls until a container has exited, and fails unless it exited 0.
func waitExited(ctx context.Context, rs internalapi.RuntimeService, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := rs.ContainerStatus(ctx, id, false)
		if err != nil {
			return fmt.Errorf("status of the load client: %w", err)
		}
		if s := st.GetStatus(); s.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			if s.GetExitCode() != 0 {
				return fmt.Errorf("the load client exited %d: see %s", s.GetExitCode(), s.GetLogPath())
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the load client still runs after %v", timeout)
		}
		if err := runctx.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitServing polls url until it answers 200.
func waitServing(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the LS service at %s does not answer after %v (last: %v)", url, timeout, err)
		}
		if err := runctx.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}
