// Command crilatency measures what tandem-proxy costs a node. It starts a
// private containerd with 100 running containers, puts tandem-proxy and a
// minimal frame-forwarding proxy (the floor that any Go gRPC proxy pays for
// its extra hop) in front of it, and times Version, ListPodSandbox and
// ListContainers on all three sockets, interleaved in one run, sequentially
// and with 8 callers in parallel. Then it measures tandem-proxy's memory and
// CPU while idle. See docs/performance.md for how to read the figures.
//
//	go run ./bench/crilatency [--iterations N] [--idle-seconds S] [--json out.json]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

type options struct {
	flavor           string
	pods             int
	containersPerPod int
	iterations       int
	runs             int
	batch            int
	warmup           int
	idleSeconds      int
	idleSettle       time.Duration
	jsonPath         string
	proxyBinary      string
	proxyVerbosity   int
	targets          []string
	workDir          string

	// floorListen and floorBackend make this binary serve the floor proxy
	// instead; with --floor-from-benchmark the benchmark starts a copy of
	// itself that way, as it ran the floor until it built the floor's own
	// program (bench/floorproxy/cmd/floor-proxy).
	floorListen, floorBackend string
	floorPprof                string
	floorUnary                bool
	floorInProcess            bool
	floorFromBenchmark        bool
	aa                        bool
	gcInBatches               bool
	aaExtraWork               time.Duration
}

func main() {
	var o options
	fs := pflag.NewFlagSet("crilatency", pflag.ExitOnError)
	fs.StringVar(&o.flavor, "flavor", framework.Flavor16, "containerd to run: "+framework.Flavor16+" (Debian) or "+framework.Flavor2+" (v2.4.2 built from source)")
	fs.IntVar(&o.pods, "pods", 10, "pods to run")
	fs.IntVar(&o.containersPerPod, "containers-per-pod", 10, "running containers in each pod")
	fs.IntVar(&o.iterations, "iterations", 40000, "timed calls per RPC, per mode and per target")
	fs.IntVar(&o.runs, "runs", 2, "complete latency runs, one after the other on the same containerd and proxies; none may show a miss of the latency targets")
	fs.IntVar(&o.batch, "batch", 25, "calls each caller makes before the next target takes its turn")
	fs.IntVar(&o.warmup, "warmup", 100, "untimed calls per caller per RPC, mode and target before timing")
	fs.IntVar(&o.idleSeconds, "idle-seconds", 60, "how long to measure tandem-proxy's idle CPU")
	fs.DurationVar(&o.idleSettle, "idle-settle", 5*time.Second, "pause after the latency run before the idle measurement starts")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.proxyBinary, "proxy-binary", "", "use this tandem-proxy binary instead of building ./cmd/tandem-proxy")
	fs.IntVar(&o.proxyVerbosity, "proxy-v", 0, "klog verbosity of tandem-proxy while it is measured")
	fs.StringSliceVar(&o.targets, "targets", []string{targetDirect, targetFloor, targetTandem}, "sockets to measure (direct, floor, tandem); the ratios need all three")
	fs.StringVar(&o.workDir, "work-dir", os.TempDir(), "where the run's private directory is created (keep it short: unix socket paths must stay under 108 bytes)")
	fs.BoolVar(&o.floorUnary, "floor-unary", true, "let the floor relay the CRI's unary methods with one Invoke, as a proxy that knows the CRI can; false leaves it a pure frame pump")
	fs.BoolVar(&o.floorInProcess, "floor-in-process", false, "serve the floor from the benchmark's own process, beside its callers: not how a proxy runs, and it flatters the floor (docs/performance.md says by how much); it is how the measurement that disagreed with this benchmark was set up")
	fs.BoolVar(&o.floorFromBenchmark, "floor-from-benchmark", false, "run the floor from a copy of this benchmark's executable, as until 29 November 2026, instead of its own program built as tandem-proxy is: that build of the same relay code relays about 11% faster than every other build of it measured (docs/performance.md); with --aa the second floor stays the floor's own program, so the check shows the difference")
	fs.BoolVar(&o.gcInBatches, "gc-in-batches", false, "let the benchmark's own garbage collector run while calls are timed, as it did until 29 November 2026, instead of collecting between batches: it then lands on whichever target is being timed (docs/performance.md)")
	fs.BoolVar(&o.aa, "aa", false, "A/A check of the benchmark itself: a second floor proxy takes tandem-proxy's place, so the ratios show what two identical proxies get on this machine")
	fs.DurationVar(&o.aaExtraWork, "aa-extra-work", 0, "with --aa, the second floor burns this much CPU on every call before relaying it: a proxy slower by a known amount, to see the verdict catch it")
	fs.StringVar(&o.floorListen, "serve-floor-listen", "", "internal: serve the floor proxy on this socket")
	fs.StringVar(&o.floorBackend, "serve-floor-backend", "", "internal: the floor proxy's backend endpoint")
	fs.StringVar(&o.floorPprof, "serve-floor-pprof", "", "internal: serve Go's profiles of the floor proxy on this unix socket")
	_ = fs.MarkHidden("serve-floor-pprof")
	_ = fs.MarkHidden("serve-floor-listen")
	_ = fs.MarkHidden("serve-floor-backend")
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

	var err error
	if o.floorListen != "" {
		err = serveFloor(ctx, o.floorListen, o.floorBackend, o.floorPprof, o.floorUnary)
	} else {
		err = runBenchmark(ctx, o)
	}
	runctx.Exit(ctx, err)
}

func (o options) validate() error {
	var errs []error
	if o.flavor != framework.Flavor16 && o.flavor != framework.Flavor2 {
		errs = append(errs, fmt.Errorf("--flavor %q: use %s or %s", o.flavor, framework.Flavor16, framework.Flavor2))
	}
	for name, v := range map[string]int{"--pods": o.pods, "--containers-per-pod": o.containersPerPod, "--iterations": o.iterations, "--batch": o.batch, "--runs": o.runs} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s must be at least 1", name))
		}
	}
	if o.floorInProcess && o.aa {
		errs = append(errs, errors.New("--floor-in-process and --aa do not go together: the A/A check compares two floors run alike"))
	}
	if o.floorInProcess && o.floorFromBenchmark {
		errs = append(errs, errors.New("--floor-in-process and --floor-from-benchmark do not go together: choose where the floor runs"))
	}
	if o.aaExtraWork < 0 || (o.aaExtraWork > 0 && !o.aa) {
		errs = append(errs, errors.New("--aa-extra-work must not be negative and needs --aa: it slows the A/A check's second floor"))
	}
	if o.warmup < 0 || o.idleSeconds < 0 {
		errs = append(errs, errors.New("--warmup and --idle-seconds cannot be negative"))
	}
	for _, t := range o.targets {
		if t != targetDirect && t != targetFloor && t != targetTandem {
			errs = append(errs, fmt.Errorf("--targets: unknown target %q: use %s", t, strings.Join([]string{targetDirect, targetFloor, targetTandem}, ", ")))
		}
	}
	return errors.Join(errs...)
}
