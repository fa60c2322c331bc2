// Command colocation measures what colocation costs a latency-sensitive (LS) service and what it
// gives batch (BE) work, on real containerd, with and without tandem-proxy in front (issue 13).
//
// An LS pod (Burstable, 500m) serves HTTP, burning 0.2 ms of CPU per request (-work, on its thread's CPU clock). A second
// LS pod runs the load client, which sends requests open-loop at a fixed rate (-light, -heavy) and
// measures each latency from the request's intended send time, so a stalled client or server cannot
// hide its queue (no coordinated omission). Next to them run -be BE pods, each one antagonist
// (-antagonist): a spinning shell (cpu, the default), or this binary streaming memory (memory: copies
// between two 64 MiB buffers) or thrashing the last-level cache (cache: random reads of a 64 MiB
// buffer); with the last two the LS service also reads 256 KiB of a 16 MiB working set per request
// (-touch), so that it has a cache to lose. Each setting is measured at both loads, for -duration, in -rounds interleaved rounds whose
// order rotates so that noise lands on all:
//
//	solo            the LS pods alone (the baseline of every ratio, measured in the same round)
//	plain           BE pods created on containerd directly, as kubelet makes BestEffort pods without Tandem
//	tandem          through tandem-proxy with its default policies; on a virtual machine (this machine is
//	                one) that includes the steal headroom (metrics/headroom), which holds BE back while
//	                the host takes CPU back
//	tandem-noheadroom the same with resource-threshold-config's stealHeadroom off
//	tandem-yield    the same with beClass.cpuQOS.yieldThreads on (off by default): BE threads on the
//	                BE thread scheduling loop's (actuate/yield) SCHED_BATCH, measured against the default
//	tandem-cpuset   through tandem-proxy, cpuset suppression at -suppress-threshold percent
//	tandem-cfsquota through tandem-proxy, cfsQuota suppression at -suppress-threshold percent
//	tandem-cfsquota-100ms the same with resource-threshold-config's beCFSPeriodMicros at the kernel's 100 ms
//	                (1 s by default: at 100 ms LS pods paid 2.7-3.0x solo at p99)
//	tandem-nopolicies, tandem-nocpuidle, tandem-nocpuset, tandem-nobatch
//	                Tandem's defaults with no built-in policy, or without one of cpuidle (BE pods' cpu.idle),
//	                cpuset (the pools) or batchresource (BE containers' shares and quota from batch-cpu):
//	                which part of the defaults an LS cell's difference from plain comes from
//	tandem-with-P1+P2 Tandem's defaults with only built-in policies P1, P2, ... (e.g. tandem-with-qos+cpuidle)
//	tandem-lswait   Tandem's defaults plus the LS wait guard (resource-threshold-config lsWaitGuard, off
//	                by default) on the eBPF run-queue collector (--run-queue-latency, 2 s interval; tracefs is
//	                mounted for the run if it is not, and unmounted after): what turning it on costs or gives
//	                LS pods; the guard's holds and releases are logged at the end of each round
//
// The host view measures the same with the load client as a process in the bench's own cgroup (the
// root cgroup when run from a root shell, where node daemons such as kubelet live), at -host-rate;
// and times -pod-starts pod starts (RunPodSandbox + CreateContainer + StartContainer, kubelet's work
// for a new pod) through the setting's runtime endpoint while BE runs.
//
// Pods are created through the CRI as kubelet creates them, under a private cgroup root
// (/tdm-coloc-<pid>/kubepods/...): the host's /kubepods is never touched. Everything the run creates
// (containers, cgroups, containerd's directory, proxies) is removed at the end, also on Ctrl-C.
// The bench reports and does not judge: it exits 0 whatever the figures, printing the issue's
// targets beside them. docs/performance.md explains the figures.
//
// The host can stall the machine's CPUs (steal time): each cell records its steal, samples every
// CPU's steal every 10 ms, and counts as stalled the requests whose [due, done] overlapped steal on
// a CPU they ran on (the server's at the start and end of handling, the client's at send and
// receipt). The tables print that count and the percentiles of the other, clean requests beside
// those of all; docs/colocation.md ("The machine itself stalls busy CPUs") gives the limits.
//
//	go run ./bench/colocation [-duration 20s] [-rounds 2] [-json out.json]
//
// Run as "colocation serve ..." or "colocation load ..." the binary is the LS service or the load
// client; the bench starts itself that way, built static, inside the pods.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/batchresource"
	"github.com/tandemkit/tandem/hooks/policy/cpuidle"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
)

// The settings, in the order of the first round.
const (
	settingPlain     = "plain"
	settingTandem    = "tandem"
	settingYield     = "tandem-yield"
	settingCPUSet    = "tandem-cpuset"
	settingCFSQuota  = "tandem-cfsquota"
	settingCFSQ100ms = "tandem-cfsquota-100ms"
	settingNoSteal   = "tandem-noheadroom"
	settingLSWait    = "tandem-lswait"
	settingNoPolicy  = "tandem-nopolicies"
	settingNoIdle    = "tandem-nocpuidle"
	settingNoCPUSet  = "tandem-nocpuset"
	settingNoBatch   = "tandem-nobatch"
	// settingWith prefixes a setting that runs only the policies it names, joined by "+".
	settingWith = "tandem-with-"
)

// withoutPolicy are the settings that run Tandem's defaults less built-in policies, and those policies.
var withoutPolicy = map[string][]string{
	settingNoPolicy: policy.Names(), settingNoIdle: {cpuidle.Name}, settingNoCPUSet: {cpuset.Name}, settingNoBatch: {batchresource.Name},
}

var allSettings = []string{settingSolo, settingPlain, settingTandem, settingNoSteal, settingYield, settingCPUSet, settingCFSQuota, settingCFSQ100ms, settingLSWait,
	settingNoPolicy, settingNoIdle, settingNoCPUSet, settingNoBatch}

type options struct {
	flavor            string
	duration, warmup  time.Duration
	settle            time.Duration
	rounds            int
	light, heavy      float64
	hostRate          float64
	be                int
	work              time.Duration
	antagonist        string
	ls                string
	hostOnly          bool
	touch             int
	suppressThreshold int
	podStarts         int
	maxSteal          time.Duration
	stealRetries      int
	settings          []string
	jsonPath          string
	proxyBinary       string
	workDir           string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	var err error
	if len(os.Args) > 2 && os.Args[1] == "antagonist" {
		if err := antagonistMain(ctx, os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "load") {
		err = agentMain(ctx, os.Args[1], os.Args[2:])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	var o options
	// The standard flag package, so that -duration 5s and --duration 5s both work.
	fs := flag.NewFlagSet("colocation", flag.ExitOnError)
	fs.StringVar(&o.flavor, "flavor", framework.Flavor16, "containerd to run: "+framework.Flavor16+" (Debian) or "+framework.Flavor2+" (v2.4.2 built from source)")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured time of each cell (a setting at a load)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "load sent before each measured window, not counted")
	fs.DurationVar(&o.settle, "settle", 3*time.Second, "wait after the BE pods start, before measuring (suppression needs a few usage samples)")
	fs.IntVar(&o.rounds, "rounds", 2, "interleaved rounds; the order of the settings rotates from one to the next")
	fs.Float64Var(&o.light, "light", 400, "light LS load, requests per second")
	fs.Float64Var(&o.heavy, "heavy", 1200, "heavy LS load, requests per second")
	fs.Float64Var(&o.hostRate, "host-rate", 400, "load of the host view's client, requests per second (0 skips the host view)")
	fs.BoolVar(&o.hostOnly, "host-only", false, "measure the host view only (no pod view)")
	fs.IntVar(&o.be, "be", 3, "BE pods, each one antagonist")
	fs.StringVar(&o.antagonist, "antagonist", antagonistCPU, "what each BE pod runs: cpu (a spinning shell), memory (copies between two 64 MiB buffers), cache (random reads of a 64 MiB buffer, twice the L3 here)")
	fs.StringVar(&o.ls, "ls", lsGo, "the LS service: go (this binary's server, -work and -touch per request) or nginx (Debian's nginx serving a 4 KiB page, its image built here from the package)")
	fs.IntVar(&o.touch, "touch", -1, "bytes of its 16 MiB working set the LS service reads per request (random lines); -1: 0 with the cpu antagonist, 256 KiB with the others")
	fs.DurationVar(&o.work, "work", 200*time.Microsecond, "CPU time the LS service burns per request (measured on the serving thread's own clock)")
	fs.IntVar(&o.suppressThreshold, "suppress-threshold", 65, "cpuSuppressThresholdPercent of the suppression settings")
	fs.IntVar(&o.podStarts, "pod-starts", 5, "pod starts timed per setting and round (0 skips them)")
	fs.DurationVar(&o.maxSteal, "max-steal", 20*time.Millisecond, "a cell during which the hypervisor took more CPU time than this from the machine (steal in /proc/stat) is measured again")
	fs.IntVar(&o.stealRetries, "steal-retries", 2, "how many times a cell is measured again for steal; the last attempt is kept whatever its steal")
	settings := fs.String("settings", strings.Join(allSettings, ","), "comma-separated settings to measure (solo is always measured: it is the baseline)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.proxyBinary, "proxy-binary", "", "use this tandem-proxy binary instead of building ./cmd/tandem-proxy")
	fs.StringVar(&o.workDir, "work-dir", os.TempDir(), "where the run's private directory is created (keep it short: unix socket paths must stay under 108 bytes)")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	o.settings = strings.Split(*settings, ",")
	ctx = klog.NewContext(ctx, klog.Background())

	runctx.Exit(ctx, runBench(ctx, o))
}

func (o *options) validate() error {
	var errs []error
	if o.flavor != framework.Flavor16 && o.flavor != framework.Flavor2 {
		errs = append(errs, fmt.Errorf("-flavor %q: use %s or %s", o.flavor, framework.Flavor16, framework.Flavor2))
	}
	if o.duration < time.Second || o.rounds < 1 || o.light <= 0 || o.heavy <= 0 || o.be < 1 {
		errs = append(errs, errors.New("-duration must be at least 1s, -rounds, -be, -light and -heavy at least 1"))
	}
	if o.suppressThreshold < 1 || o.suppressThreshold > 100 {
		errs = append(errs, fmt.Errorf("-suppress-threshold %d: a percentage in 1..100", o.suppressThreshold))
	}
	for _, s := range o.settings {
		if only, ok := strings.CutPrefix(s, settingWith); ok {
			for _, p := range strings.Split(only, "+") {
				if !slices.Contains(policy.Names(), p) {
					errs = append(errs, fmt.Errorf("-settings %s: unknown policy %q: use %s", s, p, strings.Join(policy.Names(), ", ")))
				}
			}
			continue
		}
		if !slices.Contains(allSettings, s) {
			errs = append(errs, fmt.Errorf("-settings: unknown %q: use %s", s, strings.Join(allSettings, ", ")))
		}
	}
	if !slices.Contains([]string{antagonistCPU, antagonistMemory, antagonistCache}, o.antagonist) {
		errs = append(errs, fmt.Errorf("-antagonist %q: use %s, %s or %s", o.antagonist, antagonistCPU, antagonistMemory, antagonistCache))
	}
	if o.ls != lsGo && o.ls != lsNginx {
		errs = append(errs, fmt.Errorf("-ls %q: use %s or %s", o.ls, lsGo, lsNginx))
	}
	if o.touch < 0 {
		o.touch = 0
		if o.antagonist != antagonistCPU {
			o.touch = 256 << 10
		}
	}
	if !slices.Contains(o.settings, settingSolo) {
		o.settings = append([]string{settingSolo}, o.settings...)
	}
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("runs a private containerd and creates cgroups: run as root"))
	}
	return errors.Join(errs...)
}

// agentMain runs the binary as the LS service or the load client.
func agentMain(ctx context.Context, mode string, args []string) error {
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "serve: listen address")
	work := fs.Duration("work", 200*time.Microsecond, "serve: CPU burnt per request")
	touch := fs.Int("touch", 0, "serve: bytes of its 16 MiB working set read per request, in random 64-byte lines")
	url := fs.String("url", "", "load: URL to GET")
	rate := fs.Float64("rate", 400, "load: requests per second")
	warmup := fs.Duration("warmup", time.Second, "load: unmeasured lead-in")
	d := fs.Duration("duration", 20*time.Second, "load: measured time")
	timeout := fs.Duration("timeout", 5*time.Second, "load: per-request timeout")
	out := fs.String("out", "", "load: result file (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if mode == "serve" {
		return serveMain(ctx, *addr, *work, *touch)
	}
	if *url == "" || *out == "" {
		return errors.New("load needs -url and -out")
	}
	return loadMain(ctx, *url, *rate, *warmup, *d, *timeout, *out)
}
