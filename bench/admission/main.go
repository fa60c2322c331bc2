// Command admission measures the admission latency tandem-webhook adds to a pod create (issue:
// "admission latency p50/p99 at 50 pods/s with 20 profiles, against the API server's own round
// trip without the webhook measured in the same run; target: the webhook adds ≤ 2 ms p99").
//
// It starts a private etcd (Debian's) and kube-apiserver (the v1.36.3 build the tier-2 harness
// caches; run `make cluster-up` or `make e2e-cluster` once to build it) in a temporary directory,
// builds and starts tandem-webhook as a process of its own with its serving certificate from files
// (--tls-cert-file: the self-signed Secret and caBundle machinery of admission/certs is not
// exercised), applies deploy/webhook/crd.yaml, 20 ClusterColocationProfiles and webhook
// configurations equivalent to deploy/webhook/webhooks.yaml that call the webhook at its
// https://127.0.0.1 URL with failurePolicy Fail and take namespace bench-webhook only.
//
// Beside it runs a floor webhook (floor.go): the benchmark's own binary started again as a
// process of its own, registered with webhook configurations like tandem-webhook's (same rules,
// timeouts, failurePolicy Fail, sideEffects None, v1 reviews, TLS with the same certificate from
// files, a URL on 127.0.0.1) that take namespace bench-floor only. It is the leanest Go admission
// webhook: it decodes the AdmissionReview with encoding/json into the admission/v1 types and
// answers allowed, on the mutating path with the JSON patch tandem-webhook answered for the same
// pod, asked of the running tandem-webhook once at setup (with the pod's own random token volume
// name written in). It neither decodes the pod nor looks at profiles, computes, validates or logs.
// Setup checks that a pod admitted through the floor comes out as through tandem-webhook, so the
// API server does the same work with either answer (decoding it, applying the patch, decoding the
// pod again, validating).
//
// Then it sends pod CREATEs with dryRun=All (the API server runs the whole admission chain,
// webhooks included, and stores nothing, so no scheduler or kubelet is needed), open loop at -rate
// per second in all, so the API server gets the rate, not a multiple of it. Each request's
// kind is drawn at random, the three equally likely (a random order within each block of three
// slots, so each kind gets exactly a third): kind A in bench-plain (the API server's own round
// trip), kind B in bench-webhook (plus tandem-webhook's mutating and validating calls), kind C in
// bench-floor (plus the floor's two calls). All kinds see the same machine noise. Each latency
// counts from when the request was due, not when it was sent, so neither a slow API server nor a
// late dispatcher can hide a queue. Every B and C answer must carry the profiles the benchmark
// expects (tandem.io/colocation-profiles) and every A answer none. The pods alternate between a
// web replica (LS) and a Spark executor that the profiles turn BE, in the same order for every
// kind.
//
// It prints p50/p90/p99/max of the three kinds and their differences: B − A (what a user sees),
// C − A (what calling any webhook with this patch costs on this machine) and B − C (what
// tandem-webhook adds over the leanest webhook). The target is judged on B − C at p99: B − A holds
// the API server's own cost of calling a webhook at all, which no webhook can remove. It also
// prints both webhooks' server-side latency (the same histogram,
// tandem_webhook_admission_duration_seconds), the API server's view of each webhook call, both
// handlers' CPU per review in this process, the CPU time the processes used, and a verdict line.
// It exits non-zero when B − C at p99 is over -target or any request failed. Everything it
// started is stopped and removed at the end, Ctrl-C included (a second Ctrl-C kills at once; the
// servers then die with the benchmark, but the temporary directory stays).
//
//	go run ./bench/admission [-rate 50] [-duration 120s] [-warmup 5s] [-target 2ms]
//	go run ./bench/admission -aa      # A/A: all three kinds without a webhook, the noise floor
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

type options struct {
	rate             float64
	duration, warmup time.Duration
	target, timeout  time.Duration
	seed             uint64
	protobuf, aa     bool
	keep             bool
	apiserver        string
	handlerIters     int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills at once.
		<-ctx.Done()
		stop()
	}()
	if path := os.Getenv(floorEnv); path != "" {
		// This is the floor webhook's process, which the benchmark started.
		ctx = klog.NewContext(ctx, klog.Background())
		runctx.Exit(ctx, serveFloor(ctx, path))
		return
	}
	var o options
	// The standard flag package, so that -duration 5s and --duration 5s both work.
	fs := flag.NewFlagSet("admission", flag.ExitOnError)
	fs.Float64Var(&o.rate, "rate", 50, "pod creates per second sent to the API server, all kinds together; each request's kind is drawn at random, A, B and C equally")
	fs.DurationVar(&o.duration, "duration", 120*time.Second, "measured time; each kind gets a third of rate × duration requests")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "load sent before the measured time, not counted (connections open, caches fill)")
	fs.DurationVar(&o.target, "target", 2*time.Millisecond, "the most tandem-webhook may add to the p99 latency over the floor webhook (B − C)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "timeout of one pod create (the webhooks themselves have 5 s)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the interleaving order (0: from the clock)")
	fs.BoolVar(&o.protobuf, "protobuf", true, "send and receive pods as protobuf, as controllers do (false: JSON, as kubectl does)")
	fs.BoolVar(&o.aa, "aa", false, "A/A check of the benchmark itself: kinds B and C go to bench-plain too, so the differences show what identical kinds get on this machine")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, certificates, etcd data) and print its path")
	fs.IntVar(&o.handlerIters, "handler-iterations", 2000, "reviews of each kind served by tandem-webhook's and the floor's handlers in this process after the run, for their CPU cost without network or load (0 skips)")
	fs.StringVar(&o.apiserver, "kube-apiserver", "", "kube-apiserver binary (default: the tier-2 harness's cached "+controlplane.KubernetesVersion+" build)")
	klog.InitFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctx = klog.NewContext(ctx, klog.Background())
	runctx.Exit(ctx, run(ctx, o))
}

func (o options) validate() error {
	var errs []error
	if o.rate <= 0 {
		errs = append(errs, errors.New("-rate must be positive"))
	}
	if o.duration <= 0 || o.warmup < 0 || o.timeout <= 0 {
		errs = append(errs, errors.New("-duration and -timeout must be positive, -warmup not negative"))
	}
	if n := perKind(o.rate, o.duration); o.rate > 0 && n < 100 {
		errs = append(errs, fmt.Errorf("-rate %g × -duration %s is %d requests per kind: a p99 needs at least 100", o.rate, o.duration, n))
	}
	return errors.Join(errs...)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/admission: "+format+"\n", args...)
}

// snapshot is what the benchmark reads at both ends of the measured window.
type snapshot struct {
	at                                 time.Time
	cpuHook, cpuFloor, cpuAPI, cpuEtcd float64
	cpuSelf                            float64
	hookHist, floorHist, apiHist       map[string]*histogram
	hookPatched, hookAllowed           float64
}

func run(ctx context.Context, o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	etcdBin, err := controlplane.FindEtcd()
	if err != nil {
		return err
	}
	apiBin, err := controlplane.Binary("kube-apiserver", o.apiserver)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tandem-bench-admission-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep {
			progress("kept %s", dir)
			return
		}
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			progress("remove %s: %v", dir, rmErr)
		}
	}()
	s := &servers{dir: dir}
	defer s.stop(context.WithoutCancel(ctx))
	m := &measurement{o: o, s: s, etcdBin: etcdBin, apiBin: apiBin, httpc: &http.Client{Timeout: 10 * time.Second}}
	if err := m.setUp(ctx); err != nil {
		return err
	}
	if err := m.load(ctx); err != nil {
		return err
	}
	return m.print()
}

func row(name string, s stats) {
	fmt.Printf("%-36s %6d %5d %9s %9s %9s %9s %9s %9s\n", name, s.n, s.failed, figures.Duration(s.mean), figures.Duration(s.p50), figures.Duration(s.p90), figures.Duration(s.p99), figures.Duration(s.max), figures.Duration(s.lagMax))
}

func printErrors(st [kinds]stats) {
	for k := range kinds {
		msgs := make([]string, 0, len(st[k].errors))
		for m := range st[k].errors {
			msgs = append(msgs, m)
		}
		sort.Slice(msgs, func(i, j int) bool { return st[k].errors[msgs[i]] > st[k].errors[msgs[j]] })
		for i, m := range msgs {
			if i == 5 {
				fmt.Printf("  ... and %d other errors\n", len(msgs)-5)
				break
			}
			fmt.Printf("kind %c error ×%d: %s\n", 'A'+k, st[k].errors[m], m)
		}
	}
}

// errNotAdmitted reports an answer the webhook did not (or should not have) mutated as expected.
type errNotAdmitted struct{ msg string }

func (e errNotAdmitted) Error() string { return e.msg }

// checkAdmitted checks a dry-run answer from ns: from bench-webhook and bench-floor it must carry
// exactly the profiles the benchmark expects, from bench-plain none.
func checkAdmitted(got *corev1.Pod, ns, want string) error {
	a, ok := got.Annotations[admission.AnnotationProfiles]
	hooked := ns == nsWebhook || ns == nsFloor
	switch {
	case hooked && !ok:
		return errNotAdmitted{"answer from " + ns + " not mutated: the webhook was bypassed"}
	case hooked && a != want:
		return errNotAdmitted{fmt.Sprintf("answer from %s mutated by profiles %q, want %q", ns, a, want)}
	case !hooked && ok:
		return errNotAdmitted{fmt.Sprintf("answer from %s mutated by profiles %q: the webhook should not see it", ns, a)}
	}
	return nil
}

// waitProfiles waits until the webhook's cache holds every profile (its tandem_webhook_profiles
// gauge) and none is invalid.
func waitProfiles(ctx context.Context, s *servers, httpc *http.Client, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		body, err := controlplane.Fetch(ctx, httpc, s.metricsURL+"/metrics", "")
		if err == nil {
			got, _ := gaugeValue(body, "tandem_webhook_profiles")
			bad, _ := gaugeValue(body, "tandem_webhook_profiles_invalid")
			if bad > 0 {
				return fmt.Errorf("tandem-webhook left out %.0f profiles as invalid; its log:\n%s", bad, s.hook.LogTail(3000))
			}
			if int(got) == n {
				return nil
			}
			err = fmt.Errorf("tandem_webhook_profiles is %.0f", got)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the webhook did not load %d profiles within a minute: %w", n, err)
		}
		if err := runctx.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// takeSnapshot reads the processes' CPU time and the webhooks' and API server's histograms.
func takeSnapshot(ctx context.Context, s *servers, httpc *http.Client) (snapshot, error) {
	sn := snapshot{at: time.Now()}
	for _, p := range []*framework.Daemon{s.hook, s.floor, s.apiserver, s.etcd} {
		if err := p.Exited(); err != nil {
			return sn, err
		}
	}
	var err error
	for _, c := range []struct {
		pid int
		dst *float64
	}{{s.hook.PID(), &sn.cpuHook}, {s.floor.PID(), &sn.cpuFloor}, {s.apiserver.PID(), &sn.cpuAPI}, {s.etcd.PID(), &sn.cpuEtcd}, {os.Getpid(), &sn.cpuSelf}} {
		if *c.dst, err = controlplane.CPUSeconds(c.pid); err != nil {
			return sn, fmt.Errorf("CPU time of pid %d: %w", c.pid, err)
		}
	}
	hook, err := controlplane.Fetch(ctx, httpc, s.metricsURL+"/metrics", "")
	if err != nil {
		return sn, fmt.Errorf("tandem-webhook metrics: %w", err)
	}
	if sn.hookHist, err = parseHistograms(hook, "tandem_webhook_admission_duration_seconds", "webhook"); err != nil {
		return sn, err
	}
	reqs, err := parseCounters(hook, "tandem_webhook_admission_requests_total", "decision")
	if err != nil {
		return sn, err
	}
	sn.hookPatched, sn.hookAllowed = reqs["patched"], reqs["allowed"]
	floor, err := controlplane.Fetch(ctx, httpc, s.floorMetricsURL+"/metrics", "")
	if err != nil {
		return sn, fmt.Errorf("floor webhook metrics: %w", err)
	}
	if sn.floorHist, err = parseHistograms(floor, "tandem_webhook_admission_duration_seconds", "webhook"); err != nil {
		return sn, err
	}
	api, err := controlplane.Fetch(ctx, controlplane.TLSClient(s.pki.CAPEM), s.apiURL+"/metrics", s.pki.Token)
	if err != nil {
		return sn, fmt.Errorf("kube-apiserver metrics: %w", err)
	}
	if sn.apiHist, err = parseHistograms(api, "apiserver_admission_webhook_admission_duration_seconds", "name"); err != nil {
		return sn, err
	}
	return sn, nil
}
