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
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	progress("tandem-webhook ready; registering its webhooks and 20 ClusterColocationProfiles")
	if err := createWebhookConfigurations(ctx, setupCS, tandemWebhooks(s.webhookPort), s.pki.caPEM); err != nil {
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
	progress("tandem-webhook admits as expected; asking it for its patches and starting the floor webhook")
	floorVs, err := floorVariants(ctx, tlsClient(s.pki.caPEM), fmt.Sprintf("https://127.0.0.1:%d", s.webhookPort), pods, submitted)
	if err != nil {
		return err
	}
	if err := s.startFloor(ctx, floorVs); err != nil {
		return err
	}
	if err := createWebhookConfigurations(ctx, setupCS, floorWebhooks(s.floorPort), s.pki.caPEM); err != nil {
		return err
	}
	if err := waitFloor(ctx, setupCS, pods, admitted); err != nil {
		return err
	}
	progress("floor webhook admits as tandem-webhook does after %s of setup; waiting for kube-apiserver to settle", time.Since(t0).Round(100*time.Millisecond))
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
	nsOf := [kinds]string{nsPlain, nsWebhook, nsFloor}
	if o.aa {
		nsOf = [kinds]string{nsPlain, nsPlain, nsPlain}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	send := func(ctx context.Context, sl slot) error {
		v := sl.seq % variants
		ns := nsOf[sl.kind]
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
	if n := perKind(o.rate, o.warmup); n > 0 {
		progress("warm-up: %s at %g pods/s in all", o.warmup, o.rate)
		warm = runSchedule(ctx, schedule(o.rate, n, rng), time.Now().Add(10*time.Millisecond), send)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	before, err := takeSnapshot(ctx, s, httpc)
	if err != nil {
		return err
	}
	n := perKind(o.rate, o.duration)
	progress("measuring: %s at %g pods/s in all (%d requests of each of %d kinds), kinds in random order, seed %d", o.duration, o.rate, n, kinds, seed)
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
	fmt.Printf("bench/admission: admission latency tandem-webhook adds to a pod CREATE (dryRun=All), open loop, against no webhook and against the leanest webhook\n")
	fmt.Printf("machine: %d CPUs (%s), GOMAXPROCS %d, kernel %s, %s, %s; load average before %s, after %s\n",
		machine.CPUs, machine.CPUModel, machine.GOMAXPROCS, machine.Kernel, machine.OS, machine.GoVersion, loadBefore, loadAfter)
	fmt.Printf("servers: kube-apiserver %s (%s), etcd %s, tandem-webhook built from this tree, the floor webhook (this binary); all on 127.0.0.1, the webhooks called at their URLs\n",
		kubernetesVersion, apiBin, etcdBin)
	fmt.Printf("webhook TLS: serving certificate from files (--tls-cert-file), so the self-signed Secret/caBundle path is not exercised; failurePolicy Fail\n")
	fmt.Printf("profiles: %d ClusterColocationProfiles; the web pod (LS) matches %d, the Spark executor (turned BE, koord-batch) %d\n",
		len(profiles), strings.Count(want[variantWeb], ",")+1, strings.Count(want[variantBatch], ",")+1)
	fmt.Printf("floor webhook: a process of its own, registered like tandem-webhook (same rules, timeouts, failurePolicy Fail, sideEffects None, v1, TLS from files); decodes the AdmissionReview (encoding/json, admission/v1) and answers allowed, mutating with tandem-webhook's own patch for that pod (%s), checked at setup to admit the pods exactly as tandem-webhook does; it does not decode the pod, match profiles, compute a patch, validate or log\n",
		patchSizes(floorVs))
	enc := "protobuf"
	if !o.protobuf {
		enc = "JSON"
	}
	fmt.Printf("load: %g pod creates/s to the API server in all, %s warm-up then %s measured, %d requests of each kind (%.1f/s each), each request's kind random, A/B/C equally (random order in each block of three; seed %d); %s over client-go's HTTP/2 connection, user in system:masters (APF exempt)\n",
		o.rate, o.warmup, o.duration, n, o.rate/kinds, seed, enc)
	if o.aa {
		fmt.Printf("A/A mode: kinds B and C go to %s as well; no webhook is called\n", nsPlain)
	}
	fmt.Println()

	kindName := [kinds]string{"A " + nsPlain + " (no webhook)", "B " + nsWebhook + " (tandem-webhook)", "C " + nsFloor + " (floor webhook)"}
	if o.aa {
		kindName[kindWebhook] = "B " + nsPlain + " (A/A)"
		kindName[kindFloor] = "C " + nsPlain + " (A/A)"
	}
	var st [kinds]stats
	fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s %9s\n", "latency from due time", "n", "fail", "mean", "p50", "p90", "p99", "max", "lag max")
	for k := range kinds {
		st[k] = summarize(outs, func(o outcome) bool { return o.kind == k })
		row(kindName[k], st[k])
		for v := range variants {
			row("  "+variantNames[v]+" pod", summarize(outs, func(o outcome) bool { return o.kind == k && o.seq%variants == v }))
		}
	}
	for _, c := range comparisons {
		d := minus(st[c.x], st[c.y])
		meaning := c.meaning
		if o.aa {
			meaning = "A/A: noise"
		}
		name := fmt.Sprintf("%c − %c (%s)", 'A'+c.x, 'A'+c.y, meaning)
		fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s\n", name, "", "", fmtSigned(d.mean), fmtSigned(d.p50), fmtSigned(d.p90), fmtSigned(d.p99), fmtSigned(d.max))
	}
	a, bb, c := st[kindPlain], st[kindWebhook], st[kindFloor]
	fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s\n", "B / A", "", "", ratio(bb.mean, a.mean), ratio(bb.p50, a.p50), ratio(bb.p90, a.p90), ratio(bb.p99, a.p99), ratio(bb.max, a.max))
	fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s\n", "B / C", "", "", ratio(bb.mean, c.mean), ratio(bb.p50, c.p50), ratio(bb.p90, c.p90), ratio(bb.p99, c.p99), ratio(bb.max, c.max))
	fmt.Println()

	window := after.at.Sub(before.at).Seconds()
	if !o.aa {
		printHistograms(os.Stdout, "tandem-webhook, server side (tandem_webhook_admission_duration_seconds, measured window; p50/p99 interpolated within the bucket):",
			after.hookHist, before.hookHist)
		fmt.Printf("  reviews answered: %.0f patched, %.0f allowed unchanged\n", after.hookPatched-before.hookPatched, after.hookAllowed-before.hookAllowed)
		printHistograms(os.Stdout, "floor webhook, server side (the same metric and buckets, measured window):",
			after.floorHist, before.floorHist)
		printHistograms(os.Stdout, "kube-apiserver's view of each webhook call (apiserver_admission_webhook_admission_duration_seconds, measured window; coarse buckets, the mean is the figure):",
			after.apiHist, before.apiHist)
		wm, wv, wSum, okW := callPair(after.apiHist, before.apiHist, "pods.mutate."+tandemWebhooks(0).domain, "pods.validate."+tandemWebhooks(0).domain)
		fm, fv, fSum, okF := callPair(after.apiHist, before.apiHist, "pods.mutate."+floorWebhooks(0).domain, "pods.validate."+floorWebhooks(0).domain)
		if okW && okF {
			fmt.Printf("  per pod, the two calls as the API server times them (means): tandem-webhook %s (%s + %s), floor %s (%s + %s); difference %s\n",
				fmtSeconds(wSum), fmtSeconds(wm), fmtSeconds(wv), fmtSeconds(fSum), fmtSeconds(fm), fmtSeconds(fv), fmtSigned(time.Duration((wSum-fSum)*float64(time.Second))))
		}
		fmt.Println()
	}
	if o.handlerIters > 0 {
		// Measured after the run and with the servers idle, so it perturbs nothing.
		hook, err := inProcessHandler(profiles)
		if err != nil {
			return fmt.Errorf("in-process handler: %w", err)
		}
		floor, err := newFloorHandler(floorVs, prometheus.NewRegistry())
		if err != nil {
			return fmt.Errorf("in-process floor handler: %w", err)
		}
		for _, h := range []struct {
			name string
			h    http.Handler
		}{{"tandem-webhook's handler", hook}, {"the floor's handler", floor}} {
			costs, err := handlerCosts(h.h, submitted, admitted, o.handlerIters)
			if err != nil {
				return fmt.Errorf("%s in process: %w", h.name, err)
			}
			fmt.Printf("%s in this process (%d reviews each as the API server sends them, no network or TLS; thread CPU time):\n", h.name, o.handlerIters)
			for _, c := range costs {
				fmt.Printf("  %-22s %6.1f KiB review  cpu p50 %-8s p99 %-8s wall mean %s\n", c.name, float64(c.bytes)/1024, fmtDur(c.cpuP50), fmtDur(c.cpuP99), fmtDur(c.wall))
			}
			fmt.Printf("  per pod (mutate + validate, p50, mean of the two pods): %s CPU\n", fmtDur(perPod(costs)))
		}
		fmt.Println()
	}
	fmt.Printf("CPU time during the measured window (%.1f s wall, %d CPUs = %.0f CPU-s available):\n", window, machine.CPUs, window*float64(machine.CPUs))
	cpuRow := func(name string, d float64, per string) {
		fmt.Printf("  %-16s %7.2f CPU-s  %5.1f%% of one CPU  %s\n", name, d, 100*d/window, per)
	}
	hookCPU := after.cpuHook - before.cpuHook
	floorCPU := after.cpuFloor - before.cpuFloor
	apiCPU := after.cpuAPI - before.cpuAPI
	perHook, perFloor := "-", "-"
	if !o.aa && bb.n > 0 && c.n > 0 {
		perHook = fmt.Sprintf("%s per pod of kind B (mutate + validate)", fmtSeconds(hookCPU/float64(bb.n)))
		perFloor = fmt.Sprintf("%s per pod of kind C (mutate + validate)", fmtSeconds(floorCPU/float64(c.n)))
	}
	cpuRow("tandem-webhook", hookCPU, perHook)
	cpuRow("floor webhook", floorCPU, perFloor)
	cpuRow("kube-apiserver", apiCPU, fmt.Sprintf("%s per pod, all kinds", fmtSeconds(apiCPU/float64(max(1, a.n+bb.n+c.n)))))
	cpuRow("etcd", after.cpuEtcd-before.cpuEtcd, "")
	cpuRow("this benchmark", after.cpuSelf-before.cpuSelf, "(the client: encoding, TLS, goroutines)")
	fmt.Println()

	if note := busyNote(loadBefore, machine.CPUs, max(a.lagMax, bb.lagMax, c.lagMax)); note != "" {
		fmt.Println(note)
	}
	failed := a.failed + bb.failed + c.failed
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
	if !o.aa {
		fmt.Printf("target: tandem-webhook adds ≤ %s at p99 over the leanest webhook (B − C)\n", fmtDur(o.target))
	}
	j := judge(st, o.target, failed+warmFailed, o.aa)
	fmt.Println(j.line)
	if !j.ok {
		return errors.New(strings.TrimPrefix(j.line, "verdict: "))
	}
	return nil
}

func row(name string, s stats) {
	fmt.Printf("%-36s %6d %5d %9s %9s %9s %9s %9s %9s\n", name, s.n, s.failed, fmtDur(s.mean), fmtDur(s.p50), fmtDur(s.p90), fmtDur(s.p99), fmtDur(s.max), fmtDur(s.lagMax))
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

// takeSnapshot reads the processes' CPU time and the webhooks' and API server's histograms.
func takeSnapshot(ctx context.Context, s *servers, httpc *http.Client) (snapshot, error) {
	sn := snapshot{at: time.Now()}
	for _, p := range []*process{s.hook, s.floor, s.apiserver, s.etcd} {
		if err := p.exited(); err != nil {
			return sn, err
		}
	}
	var err error
	for _, c := range []struct {
		pid int
		dst *float64
	}{{s.hook.pid(), &sn.cpuHook}, {s.floor.pid(), &sn.cpuFloor}, {s.apiserver.pid(), &sn.cpuAPI}, {s.etcd.pid(), &sn.cpuEtcd}, {os.Getpid(), &sn.cpuSelf}} {
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
	floor, err := fetch(ctx, httpc, s.floorMetricsURL+"/metrics", "")
	if err != nil {
		return sn, fmt.Errorf("floor webhook metrics: %w", err)
	}
	if sn.floorHist, err = parseHistograms(floor, "tandem_webhook_admission_duration_seconds", "webhook"); err != nil {
		return sn, err
	}
	api, err := fetch(ctx, tlsClient(s.pki.caPEM), s.apiURL+"/metrics", s.pki.token)
	if err != nil {
		return sn, fmt.Errorf("kube-apiserver metrics: %w", err)
	}
	if sn.apiHist, err = parseHistograms(api, "apiserver_admission_webhook_admission_duration_seconds", "name"); err != nil {
		return sn, err
	}
	return sn, nil
}
