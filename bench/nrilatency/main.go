// Command nrilatency measures what Tandem adds to starting a container, in either of its two modes,
// against containerd alone, in one run: CreateContainer and StartContainer as kubelet issues them (the
// pod sandbox already running; CreateContainer, then StartContainer at once when it returns; stop and
// remove later, outside the timed window), through three paths:
//
//	none   k8s.io/cri-client → containerd (NRI on, no plugin connected)
//	proxy  k8s.io/cri-client → tandem-proxy (default policies) → containerd
//	nri    k8s.io/cri-client → containerd → tandem-nri, its NRI plugin (default policies)
//
// Each path has a containerd 2.4.2 of its own, all three of the same config with NRI enabled on a
// private socket (bench.go says why three and why NRI is on for all). Pods are kubelet's: an LS pod
// (Burstable, koordinator.sh/qosClass=LS) and a BE pod (BestEffort with Koordinator's batch resources)
// per path, their cgroups made first as kubelet makes them, containers with kubelet's labels,
// annotations, environment and mounts.
//
// Containers are started open loop, in rounds: in each round the slots are due -rate per second, in
// blocks of one slot per path in a random order, so machine noise lands on all paths alike; every
// latency counts from when its call was due. Between rounds, untimed, the round's containers are
// stopped and removed through their own path, and BE containers are checked to have got the batch
// resources' cgroup settings through proxy and NRI, and kubelet's alone through none, so that no
// figure comes from a path whose policies did not run.
//
// It prints p50 and p99 of CreateContainer, StartContainer and their sum per path, and proxy's and
// NRI's added latency over none (difference and ratio, in the same run), with the half-run gap as the
// figures' noise; the CPU time each containerd, tandem-proxy and tandem-nri spent per container, in
// full and net of its rate at rest; Tandem's own time per stage and NRI event from its metrics; and
// the load average. It exits non-zero when any call or check fails. See docs/performance.md.
//
//	go run ./bench/nrilatency [--rounds 25] [--per-pod 2] [--rate 2] [--json out.json] [--aa] [--keep]
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

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/runctx"
)

type options struct {
	rounds, warmupRounds int
	perPod               int
	rate                 float64
	settle               time.Duration
	idle                 time.Duration
	seed                 uint64
	paths                []string
	proxyBinary          string
	nriBinary            string
	proxyVerbosity       int
	workDir              string
	jsonPath             string
	keep                 bool
	aa                   bool
}

func main() {
	var o options
	fs := pflag.NewFlagSet("nrilatency", pflag.ExitOnError)
	fs.IntVar(&o.rounds, "rounds", 25, "timed rounds; each path starts 2 x --per-pod containers in each (half LS, half BE)")
	fs.IntVar(&o.warmupRounds, "warmup-rounds", 1, "untimed rounds first (the first containers of a pod cost more: snapshots, caches)")
	fs.IntVar(&o.perPod, "per-pod", 2, "containers each pod gets in a round")
	fs.Float64Var(&o.rate, "rate", 2, "containers due per second within a round, all paths together (open loop)")
	fs.DurationVar(&o.settle, "settle", 500*time.Millisecond, "pause after each round's removals, before the next round")
	fs.DurationVar(&o.idle, "idle", 20*time.Second, "how long each process's CPU is measured at rest before the rounds (0: not), to tell its background work from what the containers cost")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the order of the paths within each block (0: from the clock)")
	fs.StringSliceVar(&o.paths, "paths", allPaths(), "paths to measure ("+strings.Join(allPaths(), ", ")+"); the comparison needs none")
	fs.StringVar(&o.proxyBinary, "proxy-binary", "", "use this tandem-proxy binary instead of building ./cmd/tandem-proxy")
	fs.StringVar(&o.nriBinary, "nri-binary", "", "use this tandem-nri binary instead of building ./cmd/tandem-nri")
	fs.IntVar(&o.proxyVerbosity, "proxy-v", 0, "klog verbosity of tandem-proxy and tandem-nri while measured")
	fs.StringVar(&o.workDir, "work-dir", os.TempDir(), "where the run's private directory is created (keep it short: unix socket paths must stay under 108 bytes)")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&o.aa, "aa", false, "A/A check of the benchmark itself: proxy and nri run no Tandem (plain containerds like none's), so the differences show what three identical paths get on this machine")
	fs.BoolVar(&o.keep, "keep", false, "keep the work dir (the logs of every containerd, tandem-proxy and tandem-nri) after a successful run too")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	ctx = klog.NewContext(ctx, klog.Background())
	runctx.Exit(ctx, run(ctx, o))
}

func (o options) validate() error {
	var errs []error
	if o.rounds < 1 || o.perPod < 1 {
		errs = append(errs, errors.New("--rounds and --per-pod must be at least 1"))
	}
	if o.warmupRounds < 0 || o.settle < 0 || o.idle < 0 {
		errs = append(errs, errors.New("--warmup-rounds, --settle and --idle cannot be negative"))
	}
	if o.rate <= 0 {
		errs = append(errs, errors.New("--rate must be positive"))
	}
	if len(o.paths) == 0 {
		errs = append(errs, errors.New("--paths is empty"))
	}
	for i, p := range o.paths {
		if !slices.Contains(allPaths(), p) {
			errs = append(errs, fmt.Errorf("--paths: unknown path %q: use %s", p, strings.Join(allPaths(), ", ")))
		}
		if slices.Contains(o.paths[:i], p) {
			errs = append(errs, fmt.Errorf("--paths: %q twice", p))
		}
	}
	return errors.Join(errs...)
}
