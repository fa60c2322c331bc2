// Command scale measures Tandem's cluster-side parts at cluster scale, each figure as a ratio
// against the same run without Tandem (issue: "Tandem at cluster scale: 5000 nodes, measured
// against kube-scheduler alone"; docs/scale.md).
//
// For each node count and each setting it starts, in a temporary directory, a private etcd
// (Debian's), the kube-apiserver and kube-scheduler the tier-2 harness builds and caches, kwok
// (sigs.k8s.io/kwok v0.8.0, built once with go install and cached) playing the kubelet of every
// simulated Node, and:
//
//   - tandem: tandem-extender and tandem-webhook, built from this checkout and run as processes as
//     deploy/ runs them (the shipped policy and GOMEMLIMIT; the extender on loopback HTTPS requiring
//     kube-scheduler's client certificate), kube-scheduler with deploy/'s configuration (both
//     profiles, the extender, nodeCacheCapable as shipped), a ClusterColocationProfile that turns
//     the batch namespace's pods BE, and one simulated agent per node (agents.go): the node reporter
//     tandem-proxy and tandem-nri run, the same code, fed a synthetic load of its node and writing
//     to the API server as a real agent does for that load;
//   - plugin: as tandem, but with tandem-scheduler (kube-scheduler with the TandemLoadAware plugin,
//     module scheduler-plugin, built from this checkout) and deploy/scheduler-plugin's
//     configuration in place of kube-scheduler and the extender;
//   - plain: kube-scheduler with the same configuration minus the extenders, no webhook, and batch
//     pods created in the form the webhook would give them; the agents publish each node's batch
//     capacity once and stop, so that batch pods have somewhere to go.
//
// Both settings raise kube-scheduler's client QPS to 5000 (as scheduler_perf does), since the
// default 50 would cap binding at 50 pods/s. Then three phases, in this order:
//
//   - full: one large batch pod (8 cores) per cold node: only the 10% cold nodes have that much batch
//     capacity, so every pod is filtered against every node (the expensive case);
//   - rate: -rate-pods pods, services and batch alternating, sent open loop at -rate per second;
//   - burst: -burst pods, alternating likewise, sent by 32 concurrent clients as fast as they go.
//
// Latency counts from when a create was due (rate) or sent (burst) to when the benchmark's watch
// saw the pod bound. It prints, per node count, each figure for both settings and their ratio, and
// judges the floors at the largest node count.
//
//	go run ./bench/scale [-nodes 1000,5000] [-settings plain,tandem,plugin] [-rate 50 -rate-pods 1500] [-burst 10000]
//	go run ./bench/scale -ci      # the CI check: 200 nodes, 1000 pods, Tandem only, with assertions
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

type options struct {
	nodes     []int
	settings  []string
	rate      float64
	ratePods  int
	burst     int
	moveProb  float64
	seed      uint64
	ci        bool
	keep      bool
	apiserver string
	scheduler string
	// extenderVerbs is "filter,prioritize" (deploy/'s), "filter", or "none" (no extender).
	extenderVerbs string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	var o options
	var nodes, settings string
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	fs.StringVar(&nodes, "nodes", "1000,5000", "simulated node counts, comma-separated; the floors are judged at the largest")
	fs.StringVar(&settings, "settings", "plain,tandem,plugin", "plain (kube-scheduler alone), tandem (with tandem-extender) and/or plugin (tandem-scheduler: the TandemLoadAware plugin in place of the extender); each Tandem setting is compared with plain")
	fs.Float64Var(&o.rate, "rate", 50, "pods/s of the rate phase, open loop")
	fs.IntVar(&o.ratePods, "rate-pods", 1500, "pods of the rate phase")
	fs.IntVar(&o.burst, "burst", 10000, "pods of the burst phase")
	fs.Float64Var(&o.moveProb, "load-move-probability", 0.1, "chance that a warm node's load steps at each report interval")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the simulated loads")
	fs.StringVar(&o.extenderVerbs, "extender-verbs", "filter,prioritize", "the extender verbs kube-scheduler calls with Tandem: deploy/'s filter,prioritize; or, as experiments, filter alone (prioritize's round trip off the scheduling cycle) or none (no extender: what the webhook and the agents cost alone)")
	fs.BoolVar(&o.ci, "ci", false, "the CI check: 200 nodes, 1000 pods (20 large batch, 200 at 50/s, 780 in a burst), with the extender and with the plugin, loads held still (placed pods add none); asserts every pod bound, batch pods within published capacity, nothing left behind")
	fs.BoolVar(&o.keep, "keep", false, "keep each run's directory (logs, configuration) and print its path")
	fs.StringVar(&o.apiserver, "kube-apiserver", "", "kube-apiserver binary (default: the tier-2 harness's cached "+controlplane.KubernetesVersion+" build)")
	fs.StringVar(&o.scheduler, "kube-scheduler", "", "kube-scheduler binary (default: the cached build)")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	var err error
	if o.nodes, err = parseInts(nodes); err != nil {
		fmt.Fprintln(os.Stderr, "-nodes:", err)
		os.Exit(2)
	}
	o.settings = strings.Split(settings, ",")
	if o.ci {
		o.nodes, o.settings, o.rate, o.ratePods, o.burst, o.moveProb = []int{200}, []string{"tandem", "plugin"}, 50, 200, 780, 0
	}
	ctx = klog.NewContext(ctx, klog.Background())
	runctx.Exit(ctx, run(ctx, o))
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 10 {
			return nil, fmt.Errorf("%q: want node counts of at least 10", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench/scale: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, o options) error {
	for _, s := range o.settings {
		if s != "plain" && s != "tandem" && s != "plugin" {
			return fmt.Errorf("-settings: %q: want plain, tandem or plugin", s)
		}
	}
	switch o.extenderVerbs {
	case "filter,prioritize", "filter", "none":
	default:
		return fmt.Errorf("-extender-verbs: %q: want filter,prioritize, filter or none", o.extenderVerbs)
	}
	bins := map[string]string{}
	var err error
	if bins["etcd"], err = controlplane.FindEtcd(); err != nil {
		return err
	}
	if bins["kube-apiserver"], err = controlplane.Binary("kube-apiserver", o.apiserver); err != nil {
		return err
	}
	if bins["kube-scheduler"], err = controlplane.Binary("kube-scheduler", o.scheduler); err != nil {
		return err
	}
	if bins["kwok"], err = ensureKwok(ctx); err != nil {
		return err
	}
	root, err := framework.RepoRoot(ctx)
	if err != nil {
		return err
	}
	binDir, err := os.MkdirTemp("", "tandem-bench-scale-bin-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(binDir) }()
	for _, b := range []string{"tandem-extender", "tandem-webhook"} {
		if bins[b], err = framework.BuildCommand(ctx, binDir, b); err != nil {
			return err
		}
	}
	if slices.Contains(o.settings, "plugin") {
		if bins["tandem-scheduler"], err = framework.BuildScheduler(ctx, binDir); err != nil {
			return err
		}
	}
	machine := figures.ReadMachine()
	var results []*result
	var errs []error
	for _, n := range o.nodes {
		for _, s := range o.settings {
			progress("== %d nodes, %s", n, s)
			r, err := runOne(ctx, o, bins, root, n, s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%d nodes, %s: %w", n, s, err))
				if ctx.Err() != nil {
					return errors.Join(errs...)
				}
				continue
			}
			results = append(results, r)
		}
	}
	fmt.Printf("\nbench/scale on %s\n", machine.Line())
	fmt.Printf("kube-apiserver and kube-scheduler %s, etcd %s, kwok %s; settings: plain = kube-scheduler alone; tandem = with tandem-extender, tandem-webhook and one agent per node; plugin = tandem-scheduler (the TandemLoadAware plugin) in place of kube-scheduler and tandem-extender, with tandem-webhook and the agents\n",
		controlplane.KubernetesVersion, bins["etcd"], kwokVersion)
	verdicts := printTables(os.Stdout, o, results)
	errs = append(errs, verdicts...)
	return errors.Join(errs...)
}

// runOne starts a cluster of n simulated nodes in one setting (plain, tandem, plugin), runs the
// phases, and stops it.
func runOne(ctx context.Context, o options, bins map[string]string, root string, n int, setting string) (_ *result, err error) {
	tandem, plugin := setting != "plain", setting == "plugin"
	dir, err := os.MkdirTemp("", fmt.Sprintf("tandem-bench-scale-%d-", n))
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, tandem: tandem}
	r := &result{nodes: n, setting: setting, tandem: tandem, stealBefore: readSteal()}
	defer func() {
		c.stop(context.WithoutCancel(ctx))
		if left := c.leftBehind(); left != nil {
			err = errors.Join(err, fmt.Errorf("left behind: %w", left))
		}
		if o.keep {
			progress("kept %s", dir)
		} else if rmErr := os.RemoveAll(dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("left behind: %s: %w", dir, rmErr))
		} else {
			r.cleanedUp = true
		}
	}()
	t0 := time.Now()
	c.cp, err = controlplane.Start(ctx, dir, bins["etcd"], bins["kube-apiserver"])
	if err != nil {
		return nil, err
	}
	cfg := c.cp.PKI.RESTConfig(c.cp.URL, "tandem-bench-scale")
	if c.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := createBase(ctx, c.cs); err != nil {
		return nil, err
	}
	if tandem {
		if err := c.setUpWebhook(ctx, dyn, root, bins["tandem-webhook"]); err != nil {
			return nil, err
		}
	}
	if err := c.startKwok(ctx, bins["kwok"]); err != nil {
		return nil, err
	}
	progress("control plane ready after %s; creating %d nodes", time.Since(t0).Round(time.Second), n)
	names, err := createNodes(ctx, c.cs, n, 16)
	if err != nil {
		return nil, err
	}
	settings, err := shippedColocation(root)
	if err != nil {
		return nil, err
	}
	agentCfg := c.cp.PKI.RESTConfig(c.cp.URL, "tandem-agent-simulated")
	agentCS, err := kubernetes.NewForConfig(agentCfg)
	if err != nil {
		return nil, err
	}
	t := newTracker()
	// The CI version holds every load still, placed pods included, so that each node's published
	// capacity stays what it was when pods were placed and the placement check is exact.
	bound := t.boundUsage
	if o.ci {
		bound = nil
	}
	ag, err := newAgents(agentCS, names, settings, o.moveProb, o.seed, bound)
	if err != nil {
		return nil, err
	}
	agentCtx, stopAgents := context.WithCancel(ctx)
	agentsDone := make(chan struct{})
	go func() {
		defer close(agentsDone)
		ag.run(agentCtx, min(64, n))
	}()
	defer func() {
		stopAgents()
		<-agentsDone
	}()
	progress("nodes Ready after %s; agents publishing batch capacity (each after a warm-up of up to one report interval)", time.Since(t0).Round(time.Second))
	if err := waitNodes(ctx, c.cs, n, 5*time.Minute, "with batch capacity published", hasBatch); err != nil {
		return nil, err
	}
	if !tandem {
		// Without Tandem nothing keeps the figures current: they stay as first published.
		stopAgents()
		<-agentsDone
	}
	// With -extender-verbs none, Tandem runs without its extender: what the webhook and the
	// agents cost alone.
	extenderOn := tandem && !plugin && o.extenderVerbs != "none"
	if extenderOn {
		x, err := writeExtenderTLS(filepath.Join(dir, "pki", "extender"))
		if err != nil {
			return nil, err
		}
		ports, err := controlplane.FreePorts(1)
		if err != nil {
			return nil, err
		}
		c.extenderPort = ports[0]
		if err := c.startExtender(ctx, bins["tandem-extender"], root, x); err != nil {
			return nil, err
		}
	}
	schedCfg := filepath.Join(dir, "kube-scheduler-config.yaml")
	schedBin := bins["kube-scheduler"]
	if plugin {
		schedBin = bins["tandem-scheduler"]
		err = pluginSchedulerConfig(root, schedCfg, c.cp.PKI.Kubeconfig)
	} else {
		err = schedulerConfig(root, schedCfg, c.cp.PKI.Kubeconfig, extenderOn, o.extenderVerbs == "filter", c.extenderPort, filepath.Join(dir, "pki", "extender"))
	}
	if err != nil {
		return nil, err
	}
	if err := c.startScheduler(ctx, schedBin, schedCfg); err != nil {
		return nil, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := t.watch(watchCtx, c.cs); err != nil {
		return nil, err
	}
	if settled, err := controlplane.WaitIdle(ctx, c.cp.APIServer, 0.5, 3, time.Minute); err == nil {
		progress("cluster up after %s; kube-apiserver %s", time.Since(t0).Round(time.Second), settled)
	}
	phases := []spec{
		{name: "full", kinds: []podKind{kindBatchBig}, n: coldNodes(n)},
		{name: "rate", kinds: []podKind{kindLS, kindBatch}, n: o.ratePods, rate: o.rate},
		{name: "burst", kinds: []podKind{kindLS, kindBatch}, n: o.burst},
	}
	r.windowStart = time.Now()
	for _, sp := range phases {
		before, err := c.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		progress("phase %s: %d pods%s", sp.name, sp.n, map[bool]string{true: fmt.Sprintf(" at %g/s", sp.rate), false: ""}[sp.rate > 0])
		timeout := 2*time.Minute + time.Duration(sp.n)*50*time.Millisecond
		pr := runPhase(ctx, c.cs, t, sp, !tandem, timeout)
		after, err := c.snapshot(ctx)
		if err != nil {
			return nil, err
		}
		r.phases = append(r.phases, phaseFigures{phaseResult: pr, usage: after.minus(before)})
		progress("  %d of %d bound, %.1f pods/s, p99 %s", pr.bound, pr.pods, pr.throughput(), figures.Duration(figures.Nearest(pr.latencies, 0.99)))
		if pr.sendErrors > 0 {
			progress("  %d creates failed; the first: %v", pr.sendErrors, pr.firstSendErr)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	r.windowEnd = time.Now()
	r.writes = ag.stats(r.windowStart, r.windowEnd, t.placedAt)
	r.stealAfter = readSteal()
	if r.schedulerRSS, err = peakRSS(c.sched.PID()); err != nil {
		return nil, err
	}
	if extenderOn {
		if r.extenderRSS, err = peakRSS(c.extender.PID()); err != nil {
			return nil, err
		}
		if err := c.checkExtenderUsed(ctx); err != nil {
			return nil, err
		}
	}
	if plugin {
		if err := c.checkPluginUsed(ctx); err != nil {
			return nil, err
		}
	}
	if tandem {
		select {
		case p := <-t.first:
			if err := sameConversion(p, kindBatchBig); err != nil {
				return nil, fmt.Errorf("the webhook did not convert batch pods as the run without Tandem creates them: %w", err)
			}
		default:
			return nil, errors.New("no batch pod was seen")
		}
	}
	r.checks = checkPlacement(ctx, c.cs, t, o.ci)
	return r, nil
}
