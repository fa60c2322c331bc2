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
// Then it sends pod CREATEs with dryRun=All (the API server runs the whole admission chain,
// webhooks included, and stores nothing, so no scheduler or kubelet is needed), open loop at
// -rate per second for each of two kinds, interleaved in random order so that both see the same
// machine noise: kind A in bench-plain (the API server's own round trip) and kind B in
// bench-webhook (plus the mutating and the validating call). Each latency counts from when the
// request was due, not when it was sent, so neither a slow API server nor a late dispatcher can
// hide a queue. Every B answer must carry the profiles the benchmark expects
// (tandem.io/colocation-profiles) and every A answer none. The pods alternate between a web
// replica (LS) and a Spark executor that the profiles turn BE, in the same order for both kinds.
//
// It prints p50/p90/p99/max of both kinds, their difference and ratio, the webhook's own
// server-side latency (its tandem_webhook_admission_duration_seconds histogram) and the API
// server's view of each webhook call, the CPU time the processes used, and a verdict line. It
// exits non-zero when the added p99 is over -target or any request failed. Everything it started
// is stopped and removed at the end, Ctrl-C included (a second Ctrl-C kills at once; the servers
// then die with the benchmark, but the temporary directory stays).
//
//	go run ./bench/admission [-rate 50] [-duration 60s] [-warmup 5s] [-target 2ms]
//	go run ./bench/admission -aa      # A/A: both kinds without the webhook, the noise floor
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/hostinfo"
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
	var o options
	// The standard flag package, so that -duration 5s and --duration 5s both work.
	fs := flag.NewFlagSet("admission", flag.ExitOnError)
	fs.Float64Var(&o.rate, "rate", 50, "pod creates per second of each kind (with and without the webhook); the API server gets twice this")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured time; each kind sends rate × duration requests")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Second, "load sent before the measured time, not counted (connections open, caches fill)")
	fs.DurationVar(&o.target, "target", 2*time.Millisecond, "the most the webhook may add to the p99 latency")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "timeout of one pod create (the webhooks themselves have 5 s)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the interleaving order (0: from the clock)")
	fs.BoolVar(&o.protobuf, "protobuf", true, "send and receive pods as protobuf, as controllers do (false: JSON, as kubectl does)")
	fs.BoolVar(&o.aa, "aa", false, "A/A check of the benchmark itself: kind B goes to bench-plain too, so the difference shows what two identical kinds get on this machine")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (logs, certificates, etcd data) and print its path")
	fs.IntVar(&o.handlerIters, "handler-iterations", 2000, "reviews of each kind served by tandem-webhook's handler in this process after the run, for its CPU cost without network or load (0 skips)")
	fs.StringVar(&o.apiserver, "kube-apiserver", "", "kube-apiserver binary (default: the tier-2 harness's cached "+kubernetesVersion+" build)")
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
	if o.rate > 0 && requestCount(o.rate, o.duration) < 100 {
		errs = append(errs, fmt.Errorf("-rate %g × -duration %s is %d requests per kind: a p99 needs at least 100", o.rate, o.duration, requestCount(o.rate, o.duration)))
	}
	return errors.Join(errs...)
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench/admission: "+format+"\n", args...)
}

// snapshot is what the benchmark reads at both ends of the measured window.
type snapshot struct {
	at                       time.Time
	cpuHook, cpuAPI, cpuEtcd float64
	cpuSelf                  float64
	hookHist, apiHist        map[string]*histogram
	hookPatched, hookAllowed float64
}

func run(ctx context.Context, o options) (err error) {
	if err := o.validate(); err != nil {
		return err
	}
	etcdBin, err := findEtcd()
	if err != nil {
		return err
	}
	apiBin, err := findAPIServer(o.apiserver)
	if err != nil {
		return err
	}
	root, err := framework.RepoRoot(ctx)
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
	defer s.stop()

	// tandem-webhook builds while the control plane starts.
	type built struct {
		bin string
		err error
	}
	buildDone := make(chan built, 1)
	go func() {
		bin, err := framework.BuildCommand(ctx, dir, "tandem-webhook")
		buildDone <- built{bin, err}
	}()
	t0 := time.Now()
	progress("starting etcd and kube-apiserver %s in %s, building tandem-webhook", kubernetesVersion, dir)
	cpErr := s.startControlPlane(ctx, etcdBin, apiBin)
	b := <-buildDone
	if cpErr != nil {
		return cpErr
	}
	if b.err != nil {
		return b.err
	}
	cfg := s.pki.restConfig(s.apiURL)
	setupCS, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	progress("API server ready after %s; applying the CRD, PriorityClass koord-batch, namespaces", time.Since(t0).Round(100*time.Millisecond))
	if err := applyCRD(ctx, dyn, root); err != nil {
		return err
	}
	if err := createBase(ctx, setupCS); err != nil {
		return err
	}
	if err := s.startWebhook(ctx, b.bin); err != nil {
		return err
	}
	progress("tandem-webhook ready; registering the webhooks and 20 ClusterColocationProfiles")
	if err := createWebhookConfigurations(ctx, setupCS, s.webhookPort, s.pki.caPEM); err != nil {
		return err
	}
	profiles := benchProfiles()
	if err := createProfiles(ctx, dyn, profiles); err != nil {
		return err
	}
	httpc := &http.Client{Timeout: 10 * time.Second}
	if err := waitProfiles(ctx, s, httpc, len(profiles)); err != nil {
		return err
	}
	pods := benchPods()
	want := expectedAnnotations(profiles)
	submitted, admitted, err := waitAdmission(ctx, setupCS, pods, want)
	if err != nil {
		return err
	}
	progress("webhook admits as expected after %s of setup; waiting for kube-apiserver to settle", time.Since(t0).Round(100*time.Millisecond))
	// A fresh API server keeps working for a while (post-start hooks, the OpenAPI spec rebuilt
	// after the CRD): that would land on the first measured requests.
	settled, err := waitIdle(ctx, s.apiserver, 0.15, 3, time.Minute)
	if err != nil {
		return err
	}
	progress("kube-apiserver settled (%s)", settled)

	// The measured client: no client-side rate limit, protobuf unless told otherwise.
	if o.protobuf {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	hookNS := nsWebhook
	if o.aa {
		hookNS = nsPlain
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	send := func(ctx context.Context, sl slot) error {
		v := sl.seq % variants
		ns := nsPlain
		if sl.kind == kindWebhook {
			ns = hookNS
		}
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, pods[v].DeepCopy(), dryRun)
		if err != nil {
			return err
		}
		return checkAdmitted(got, ns, want[v])
	}

	seed := o.seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 0x7a6d))
	machine := hostinfo.Read()
	loadBefore := hostinfo.LoadAverage()

	var warm []outcome
	if n := requestCount(o.rate, o.warmup); n > 0 {
		progress("warm-up: %s at %g pods/s per kind", o.warmup, o.rate)
		warm = runSchedule(ctx, schedule(o.rate, n, rng), time.Now().Add(10*time.Millisecond), send)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	before, err := takeSnapshot(ctx, s, httpc)
	if err != nil {
		return err
	}
	n := requestCount(o.rate, o.duration)
	progress("measuring: %s at %g pods/s per kind (%d requests each), interleaved, seed %d", o.duration, o.rate, n, seed)
	outs := runSchedule(ctx, schedule(o.rate, n, rng), time.Now().Add(10*time.Millisecond), send)
	if err := ctx.Err(); err != nil {
		return err
	}
	after, err := takeSnapshot(ctx, s, httpc)
	if err != nil {
		return err
	}
	loadAfter := hostinfo.LoadAverage()

	// The report.
	fmt.Printf("bench/admission: admission latency tandem-webhook adds to a pod CREATE (dryRun=All), open loop\n")
	fmt.Printf("machine: %d CPUs (%s), GOMAXPROCS %d, kernel %s, %s, %s; load average before %s, after %s\n",
		machine.CPUs, machine.CPUModel, machine.GOMAXPROCS, machine.Kernel, machine.OS, machine.GoVersion, loadBefore, loadAfter)
	fmt.Printf("servers: kube-apiserver %s (%s), etcd %s, tandem-webhook built from this tree; all on 127.0.0.1, the webhook called at its URL\n",
		kubernetesVersion, apiBin, etcdBin)
	fmt.Printf("webhook TLS: serving certificate from files (--tls-cert-file), so the self-signed Secret/caBundle path is not exercised; failurePolicy Fail\n")
	fmt.Printf("profiles: %d ClusterColocationProfiles; the web pod (LS) matches %d, the Spark executor (turned BE, koord-batch) %d\n",
		len(profiles), strings.Count(want[variantWeb], ",")+1, strings.Count(want[variantBatch], ",")+1)
	enc := "protobuf"
	if !o.protobuf {
		enc = "JSON"
	}
	fmt.Printf("load: %g pods/s per kind (%g/s in all), %s warm-up then %s measured, %d requests per kind, kinds interleaved in random order (seed %d); %s over client-go's HTTP/2 connection, user in system:masters (APF exempt)\n",
		o.rate, 2*o.rate, o.warmup, o.duration, n, seed, enc)
	if o.aa {
		fmt.Printf("A/A mode: kind B goes to %s as well; no webhook is called\n", nsPlain)
	}
	fmt.Println()

	kindName := [kinds]string{"A " + nsPlain + " (no webhook)", "B " + hookNS + " (webhook)"}
	if o.aa {
		kindName[kindWebhook] = "B " + hookNS + " (A/A)"
	}
	var st [kinds]stats
	fmt.Printf("%-32s %6s %5s %9s %9s %9s %9s %9s %9s\n", "latency from due time", "n", "fail", "mean", "p50", "p90", "p99", "max", "lag max")
	for k := range kinds {
		st[k] = summarize(outs, func(o outcome) bool { return o.kind == k })
		row(kindName[k], st[k])
		for v := range variants {
			row("  "+variantNames[v]+" pod", summarize(outs, func(o outcome) bool { return o.kind == k && o.seq%variants == v }))
		}
	}
	a, bb := st[kindPlain], st[kindWebhook]
	fmt.Printf("%-32s %6s %5s %9s %9s %9s %9s %9s\n", "B − A", "", "", fmtSigned(bb.mean-a.mean), fmtSigned(bb.p50-a.p50), fmtSigned(bb.p90-a.p90), fmtSigned(bb.p99-a.p99), fmtSigned(bb.max-a.max))
	fmt.Printf("%-32s %6s %5s %9s %9s %9s %9s %9s\n", "B / A", "", "", ratio(bb.mean, a.mean), ratio(bb.p50, a.p50), ratio(bb.p90, a.p90), ratio(bb.p99, a.p99), ratio(bb.max, a.max))
	fmt.Println()

	window := after.at.Sub(before.at).Seconds()
	if !o.aa {
		printHistograms(os.Stdout, "tandem-webhook, server side (tandem_webhook_admission_duration_seconds, measured window; p50/p99 interpolated within the bucket):",
			after.hookHist, before.hookHist)
		fmt.Printf("  reviews answered: %.0f patched, %.0f allowed unchanged\n", after.hookPatched-before.hookPatched, after.hookAllowed-before.hookAllowed)
		printHistograms(os.Stdout, "kube-apiserver's view of each webhook call (apiserver_admission_webhook_admission_duration_seconds, measured window; coarse buckets, the mean is the figure):",
			after.apiHist, before.apiHist)
		fmt.Println()
	}
	if o.handlerIters > 0 {
		// Measured after the run and with the servers idle, so it perturbs nothing.
		costs, err := handlerCosts(profiles, submitted, admitted, o.handlerIters)
		if err != nil {
			return fmt.Errorf("in-process handler: %w", err)
		}
		fmt.Printf("tandem-webhook's handler in this process (%d reviews each as the API server sends them, no network or TLS; thread CPU time):\n", o.handlerIters)
		for _, c := range costs {
			fmt.Printf("  %-22s %6.1f KiB review  cpu p50 %-8s p99 %-8s wall mean %s\n", c.name, float64(c.bytes)/1024, fmtDur(c.cpuP50), fmtDur(c.cpuP99), fmtDur(c.wall))
		}
		fmt.Printf("  per pod (mutate + validate, p50, mean of the two pods): %s CPU\n", fmtDur(perPod(costs)))
		fmt.Println()
	}
	fmt.Printf("CPU time during the measured window (%.1f s wall, %d CPUs = %.0f CPU-s available):\n", window, machine.CPUs, window*float64(machine.CPUs))
	cpuRow := func(name string, d float64, per string) {
		fmt.Printf("  %-16s %7.2f CPU-s  %5.1f%% of one CPU  %s\n", name, d, 100*d/window, per)
	}
	hookCPU := after.cpuHook - before.cpuHook
	apiCPU := after.cpuAPI - before.cpuAPI
	perHook := "-"
	if !o.aa && bb.n > 0 {
		perHook = fmt.Sprintf("%s per webhook pod (mutate + validate)", fmtSeconds(hookCPU/float64(bb.n)))
	}
	cpuRow("tandem-webhook", hookCPU, perHook)
	cpuRow("kube-apiserver", apiCPU, fmt.Sprintf("%s per pod, both kinds", fmtSeconds(apiCPU/float64(a.n+bb.n))))
	cpuRow("etcd", after.cpuEtcd-before.cpuEtcd, "")
	cpuRow("this benchmark", after.cpuSelf-before.cpuSelf, "(the client: encoding, TLS, goroutines)")
	fmt.Println()

	if note := busyNote(loadBefore, machine.CPUs, max(a.lagMax, bb.lagMax)); note != "" {
		fmt.Println(note)
	}
	failed := a.failed + bb.failed
	warmFailed := 0
	for _, w := range warm {
		if w.err != nil {
			warmFailed++
		}
	}
	if warmFailed > 0 {
		fmt.Printf("warm-up: %d of %d requests failed\n", warmFailed, len(warm))
	}
	printErrors(st)
	fmt.Printf("target: the webhook adds ≤ %s at p99\n", fmtDur(o.target))
	j := judge(a, bb, o.target, failed+warmFailed, o.aa)
	fmt.Println(j.line)
	if !j.ok {
		return errors.New(strings.TrimPrefix(j.line, "verdict: "))
	}
	return nil
}

func row(name string, s stats) {
	fmt.Printf("%-32s %6d %5d %9s %9s %9s %9s %9s %9s\n", name, s.n, s.failed, fmtDur(s.mean), fmtDur(s.p50), fmtDur(s.p90), fmtDur(s.p99), fmtDur(s.max), fmtDur(s.lagMax))
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

// checkAdmitted checks a dry-run answer from ns: from bench-webhook it must carry exactly the
// profiles the benchmark expects, from bench-plain none.
func checkAdmitted(got *corev1.Pod, ns, want string) error {
	a, ok := got.Annotations[admission.AnnotationProfiles]
	switch {
	case ns == nsWebhook && !ok:
		return errNotAdmitted{"answer from " + nsWebhook + " not mutated: the webhook was bypassed"}
	case ns == nsWebhook && a != want:
		return errNotAdmitted{fmt.Sprintf("answer from %s mutated by profiles %q, want %q", nsWebhook, a, want)}
	case ns != nsWebhook && ok:
		return errNotAdmitted{fmt.Sprintf("answer from %s mutated by profiles %q: the webhook should not see it", ns, a)}
	}
	return nil
}

// waitProfiles waits until the webhook's cache holds every profile (its tandem_webhook_profiles
// gauge) and none is invalid.
func waitProfiles(ctx context.Context, s *servers, httpc *http.Client, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		body, err := fetch(ctx, httpc, s.metricsURL+"/metrics", "")
		if err == nil {
			got, _ := gaugeValue(body, "tandem_webhook_profiles")
			bad, _ := gaugeValue(body, "tandem_webhook_profiles_invalid")
			if bad > 0 {
				return fmt.Errorf("tandem-webhook left out %.0f profiles as invalid; its log:\n%s", bad, s.hook.logTail(3000))
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

// takeSnapshot reads the processes' CPU time and the webhook's and API server's histograms.
func takeSnapshot(ctx context.Context, s *servers, httpc *http.Client) (snapshot, error) {
	sn := snapshot{at: time.Now()}
	for _, p := range []*process{s.hook, s.apiserver, s.etcd} {
		if err := p.exited(); err != nil {
			return sn, err
		}
	}
	var err error
	for _, c := range []struct {
		pid int
		dst *float64
	}{{s.hook.pid(), &sn.cpuHook}, {s.apiserver.pid(), &sn.cpuAPI}, {s.etcd.pid(), &sn.cpuEtcd}, {os.Getpid(), &sn.cpuSelf}} {
		if *c.dst, err = cpuSeconds(c.pid); err != nil {
			return sn, fmt.Errorf("CPU time of pid %d: %w", c.pid, err)
		}
	}
	hook, err := fetch(ctx, httpc, s.metricsURL+"/metrics", "")
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
	api, err := fetch(ctx, tlsClient(s.pki.caPEM), s.apiURL+"/metrics", s.pki.token)
	if err != nil {
		return sn, fmt.Errorf("kube-apiserver metrics: %w", err)
	}
	if sn.apiHist, err = parseHistograms(api, "apiserver_admission_webhook_admission_duration_seconds", "name"); err != nil {
		return sn, err
	}
	return sn, nil
}
