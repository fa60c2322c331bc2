package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/e2e/framework"
)

// measurement is one run: the servers and what setup made of them, the load and what it saw, and the
// servers' counters around the measured window.
type measurement struct {
	o               options
	s               *servers
	etcdBin, apiBin string
	httpc           *http.Client // plain HTTP, for the servers' metrics
	cfg             *rest.Config

	profiles            []benchProfile
	pods                [variants]*corev1.Pod
	want                [variants]string // the annotations tandem-webhook must write on each pod
	submitted, admitted [variants]*corev1.Pod
	floorVs             []floorVariant

	machine               figures.Machine
	loadBefore, loadAfter string
	seed                  uint64
	n                     int // measured requests of each kind
	warm, outs            []outcome
	before, after         snapshot
}

// setUp starts the control plane, tandem-webhook and the floor webhook, registers both, and waits
// until each admits the pods as it should and kube-apiserver has settled.
func (m *measurement) setUp(ctx context.Context) error {
	s := m.s
	root, err := framework.RepoRoot(ctx)
	if err != nil {
		return err
	}
	// tandem-webhook builds while the control plane starts.
	type built struct {
		bin string
		err error
	}
	buildDone := make(chan built, 1)
	go func() {
		bin, err := framework.BuildCommand(ctx, s.dir, "tandem-webhook")
		buildDone <- built{bin, err}
	}()
	t0 := time.Now()
	progress("starting etcd and kube-apiserver %s in %s, building tandem-webhook", controlplane.KubernetesVersion, s.dir)
	cpErr := s.startControlPlane(ctx, m.etcdBin, m.apiBin)
	b := <-buildDone
	if cpErr != nil {
		return cpErr
	}
	if b.err != nil {
		return b.err
	}
	m.cfg = s.pki.RESTConfig(s.apiURL, "tandem-bench-admission")
	setupCS, err := kubernetes.NewForConfig(m.cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(m.cfg)
	if err != nil {
		return err
	}
	progress("API server ready after %s; applying the CRD, PriorityClass koord-batch, namespaces", time.Since(t0).Round(100*time.Millisecond))
	if err := controlplane.ApplyCRD(ctx, dyn, root); err != nil {
		return err
	}
	if err := createBase(ctx, setupCS); err != nil {
		return err
	}
	if err := m.setUpWebhook(ctx, setupCS, dyn, b.bin); err != nil {
		return err
	}
	if err := m.setUpFloor(ctx, setupCS); err != nil {
		return err
	}
	progress("floor webhook admits as tandem-webhook does after %s of setup; waiting for kube-apiserver to settle", time.Since(t0).Round(100*time.Millisecond))
	// A fresh API server keeps working for a while (post-start hooks, the OpenAPI spec rebuilt
	// after the CRD): that would land on the first measured requests.
	settled, err := controlplane.WaitIdle(ctx, s.apiserver, 0.15, 3, time.Minute)
	if err != nil {
		return err
	}
	progress("kube-apiserver settled (%s)", settled)
	return nil
}

// setUpWebhook starts tandem-webhook, registers it with the profiles, and waits until it admits the
// pods as the profiles say.
func (m *measurement) setUpWebhook(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, bin string) error {
	s := m.s
	if err := s.startWebhook(ctx, bin); err != nil {
		return err
	}
	progress("tandem-webhook ready; registering its webhooks and 20 ClusterColocationProfiles")
	if err := controlplane.RegisterWebhooks(ctx, cs, tandemWebhooks(s.webhookPort), s.pki.CAPEM); err != nil {
		return err
	}
	m.profiles = benchProfiles()
	if err := createProfiles(ctx, dyn, m.profiles); err != nil {
		return err
	}
	if err := waitProfiles(ctx, s, m.httpc, len(m.profiles)); err != nil {
		return err
	}
	m.pods = benchPods()
	m.want = expectedAnnotations(m.profiles)
	var err error
	m.submitted, m.admitted, err = waitAdmission(ctx, cs, m.pods, m.want)
	return err
}

// setUpFloor starts the floor webhook with tandem-webhook's own patches, registers it, and waits until
// it admits the pods exactly as tandem-webhook does.
func (m *measurement) setUpFloor(ctx context.Context, cs kubernetes.Interface) error {
	s := m.s
	progress("tandem-webhook admits as expected; asking it for its patches and starting the floor webhook")
	var err error
	m.floorVs, err = floorVariants(ctx, controlplane.TLSClient(s.pki.CAPEM), fmt.Sprintf("https://127.0.0.1:%d", s.webhookPort), m.pods, m.submitted)
	if err != nil {
		return err
	}
	if err := s.startFloor(ctx, m.floorVs); err != nil {
		return err
	}
	if err := controlplane.RegisterWebhooks(ctx, cs, floorWebhooks(s.floorPort), s.pki.CAPEM); err != nil {
		return err
	}
	return waitFloor(ctx, cs, m.pods, m.admitted)
}

// sender is the measured client's request: a dry-run create of the slot's pod in its kind's
// namespace, checked for the annotations tandem-webhook must have written. No client-side rate limit,
// protobuf unless told otherwise.
func (m *measurement) sender() (func(context.Context, slot) error, error) {
	cfg := rest.CopyConfig(m.cfg)
	if m.o.protobuf {
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	nsOf := [kinds]string{nsPlain, nsWebhook, nsFloor}
	if m.o.aa {
		nsOf = [kinds]string{nsPlain, nsPlain, nsPlain}
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	return func(ctx context.Context, sl slot) error {
		v := sl.seq % variants
		ns := nsOf[sl.kind]
		ctx, cancel := context.WithTimeout(ctx, m.o.timeout)
		defer cancel()
		got, err := cs.CoreV1().Pods(ns).Create(ctx, m.pods[v].DeepCopy(), dryRun)
		if err != nil {
			return err
		}
		return checkAdmitted(got, ns, m.want[v])
	}, nil
}

// load runs the warm-up and the measured schedule, with the servers' counters read around the latter.
func (m *measurement) load(ctx context.Context) error {
	o := m.o
	send, err := m.sender()
	if err != nil {
		return err
	}
	m.seed = o.seed
	if m.seed == 0 {
		m.seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(m.seed, 0x7a6d))
	m.machine = figures.ReadMachine()
	m.loadBefore = figures.LoadAverage()
	if n := perKind(o.rate, o.warmup); n > 0 {
		progress("warm-up: %s at %g pods/s in all", o.warmup, o.rate)
		m.warm = runSchedule(ctx, schedule(o.rate, n, rng), time.Now().Add(10*time.Millisecond), send)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if m.before, err = takeSnapshot(ctx, m.s, m.httpc); err != nil {
		return err
	}
	m.n = perKind(o.rate, o.duration)
	progress("measuring: %s at %g pods/s in all (%d requests of each of %d kinds), kinds in random order, seed %d", o.duration, o.rate, m.n, kinds, m.seed)
	m.outs = runSchedule(ctx, schedule(o.rate, m.n, rng), time.Now().Add(10*time.Millisecond), send)
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.after, err = takeSnapshot(ctx, m.s, m.httpc); err != nil {
		return err
	}
	m.loadAfter = figures.LoadAverage()
	return nil
}

// print prints the report and returns an error when the verdict is a miss.
func (m *measurement) print() error {
	m.printHeader()
	st := m.printLatency()
	if !m.o.aa {
		m.printServerSide()
	}
	if m.o.handlerIters > 0 {
		// Measured after the run and with the servers idle, so it perturbs nothing.
		if err := m.printHandlerCosts(); err != nil {
			return err
		}
	}
	m.printCPU(st)
	return m.printVerdict(st)
}

func (m *measurement) printHeader() {
	o := m.o
	fmt.Printf("bench/admission: admission latency tandem-webhook adds to a pod CREATE (dryRun=All), open loop, against no webhook and against the leanest webhook\n")
	fmt.Printf("machine: %s; load average before %s, after %s\n", m.machine.Line(), m.loadBefore, m.loadAfter)
	fmt.Printf("servers: kube-apiserver %s (%s), etcd %s, tandem-webhook built from this tree, the floor webhook (this binary); all on 127.0.0.1, the webhooks called at their URLs\n",
		controlplane.KubernetesVersion, m.apiBin, m.etcdBin)
	fmt.Printf("webhook TLS: serving certificate from files (--tls-cert-file), so the self-signed Secret/caBundle path is not exercised; failurePolicy Fail\n")
	fmt.Printf("profiles: %d ClusterColocationProfiles; the web pod (LS) matches %d, the Spark executor (turned BE, koord-batch) %d\n",
		len(m.profiles), strings.Count(m.want[variantWeb], ",")+1, strings.Count(m.want[variantBatch], ",")+1)
	fmt.Printf("floor webhook: a process of its own, registered like tandem-webhook (same rules, timeouts, failurePolicy Fail, sideEffects None, v1, TLS from files); decodes the AdmissionReview (encoding/json, admission/v1) and answers allowed, mutating with tandem-webhook's own patch for that pod (%s), checked at setup to admit the pods exactly as tandem-webhook does; it does not decode the pod, match profiles, compute a patch, validate or log\n",
		patchSizes(m.floorVs))
	enc := "protobuf"
	if !o.protobuf {
		enc = "JSON"
	}
	fmt.Printf("load: %g pod creates/s to the API server in all, %s warm-up then %s measured, %d requests of each kind (%.1f/s each), each request's kind random, A/B/C equally (random order in each block of three; seed %d); %s over client-go's HTTP/2 connection, user in system:masters (APF exempt)\n",
		o.rate, o.warmup, o.duration, m.n, o.rate/kinds, m.seed, enc)
	if o.aa {
		fmt.Printf("A/A mode: kinds B and C go to %s as well; no webhook is called\n", nsPlain)
	}
	fmt.Println()
}

// printLatency prints the latency table: each kind and pod, the differences and the ratios.
func (m *measurement) printLatency() [kinds]stats {
	kindName := [kinds]string{"A " + nsPlain + " (no webhook)", "B " + nsWebhook + " (tandem-webhook)", "C " + nsFloor + " (floor webhook)"}
	if m.o.aa {
		kindName[kindWebhook] = "B " + nsPlain + " (A/A)"
		kindName[kindFloor] = "C " + nsPlain + " (A/A)"
	}
	var st [kinds]stats
	fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s %9s\n", "latency from due time", "n", "fail", "mean", "p50", "p90", "p99", "max", "lag max")
	for k := range kinds {
		st[k] = summarize(m.outs, func(o outcome) bool { return o.kind == k })
		row(kindName[k], st[k])
		for v := range variants {
			row("  "+variantNames[v]+" pod", summarize(m.outs, func(o outcome) bool { return o.kind == k && o.seq%variants == v }))
		}
	}
	for _, c := range comparisons {
		d := minus(st[c.x], st[c.y])
		meaning := c.meaning
		if m.o.aa {
			meaning = "A/A: noise"
		}
		name := fmt.Sprintf("%c − %c (%s)", 'A'+c.x, 'A'+c.y, meaning)
		fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s\n", name, "", "", figures.Signed(d.mean), figures.Signed(d.p50), figures.Signed(d.p90), figures.Signed(d.p99), figures.Signed(d.max))
	}
	a, bb, c := st[kindPlain], st[kindWebhook], st[kindFloor]
	fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s\n", "B / A", "", "", ratio(bb.mean, a.mean), ratio(bb.p50, a.p50), ratio(bb.p90, a.p90), ratio(bb.p99, a.p99), ratio(bb.max, a.max))
	fmt.Printf("%-36s %6s %5s %9s %9s %9s %9s %9s\n", "B / C", "", "", ratio(bb.mean, c.mean), ratio(bb.p50, c.p50), ratio(bb.p90, c.p90), ratio(bb.p99, c.p99), ratio(bb.max, c.max))
	fmt.Println()
	return st
}

// printServerSide prints each webhook's own timing and the API server's timing of the calls.
func (m *measurement) printServerSide() {
	before, after := m.before, m.after
	printHistograms(os.Stdout, "tandem-webhook, server side (tandem_webhook_admission_duration_seconds, measured window; p50/p99 interpolated within the bucket):",
		after.hookHist, before.hookHist)
	fmt.Printf("  reviews answered: %.0f patched, %.0f allowed unchanged\n", after.hookPatched-before.hookPatched, after.hookAllowed-before.hookAllowed)
	printHistograms(os.Stdout, "floor webhook, server side (the same metric and buckets, measured window):",
		after.floorHist, before.floorHist)
	printHistograms(os.Stdout, "kube-apiserver's view of each webhook call (apiserver_admission_webhook_admission_duration_seconds, measured window; coarse buckets, the mean is the figure):",
		after.apiHist, before.apiHist)
	wm, wv, wSum, okW := callPair(after.apiHist, before.apiHist, "pods.mutate."+tandemWebhooks(0).Domain, "pods.validate."+tandemWebhooks(0).Domain)
	fm, fv, fSum, okF := callPair(after.apiHist, before.apiHist, "pods.mutate."+floorWebhooks(0).Domain, "pods.validate."+floorWebhooks(0).Domain)
	if okW && okF {
		fmt.Printf("  per pod, the two calls as the API server times them (means): tandem-webhook %s (%s + %s), floor %s (%s + %s); difference %s\n",
			fmtSeconds(wSum), fmtSeconds(wm), fmtSeconds(wv), fmtSeconds(fSum), fmtSeconds(fm), fmtSeconds(fv), figures.Signed(time.Duration((wSum-fSum)*float64(time.Second))))
	}
	fmt.Println()
}

// printHandlerCosts prints both webhooks' handlers' cost in this process, without network or TLS.
func (m *measurement) printHandlerCosts() error {
	hook, err := inProcessHandler(m.profiles)
	if err != nil {
		return fmt.Errorf("in-process handler: %w", err)
	}
	floor, err := newFloorHandler(m.floorVs, prometheus.NewRegistry())
	if err != nil {
		return fmt.Errorf("in-process floor handler: %w", err)
	}
	for _, h := range []struct {
		name string
		h    http.Handler
	}{{"tandem-webhook's handler", hook}, {"the floor's handler", floor}} {
		costs, err := handlerCosts(h.h, m.submitted, m.admitted, m.o.handlerIters)
		if err != nil {
			return fmt.Errorf("%s in process: %w", h.name, err)
		}
		fmt.Printf("%s in this process (%d reviews each as the API server sends them, no network or TLS; thread CPU time):\n", h.name, m.o.handlerIters)
		for _, c := range costs {
			fmt.Printf("  %-22s %6.1f KiB review  cpu p50 %-8s p99 %-8s wall mean %s\n", c.name, float64(c.bytes)/1024, figures.Duration(c.cpuP50), figures.Duration(c.cpuP99), figures.Duration(c.wall))
		}
		fmt.Printf("  per pod (mutate + validate, p50, mean of the two pods): %s CPU\n", figures.Duration(perPod(costs)))
	}
	fmt.Println()
	return nil
}

// printCPU prints each process's CPU time over the measured window.
func (m *measurement) printCPU(st [kinds]stats) {
	before, after := m.before, m.after
	window := after.at.Sub(before.at).Seconds()
	fmt.Printf("CPU time during the measured window (%.1f s wall, %d CPUs = %.0f CPU-s available):\n", window, m.machine.CPUs, window*float64(m.machine.CPUs))
	cpuRow := func(name string, d float64, per string) {
		fmt.Printf("  %-16s %7.2f CPU-s  %5.1f%% of one CPU  %s\n", name, d, 100*d/window, per)
	}
	a, bb, c := st[kindPlain], st[kindWebhook], st[kindFloor]
	hookCPU := after.cpuHook - before.cpuHook
	floorCPU := after.cpuFloor - before.cpuFloor
	apiCPU := after.cpuAPI - before.cpuAPI
	perHook, perFloor := "-", "-"
	if !m.o.aa && bb.n > 0 && c.n > 0 {
		perHook = fmt.Sprintf("%s per pod of kind B (mutate + validate)", fmtSeconds(hookCPU/float64(bb.n)))
		perFloor = fmt.Sprintf("%s per pod of kind C (mutate + validate)", fmtSeconds(floorCPU/float64(c.n)))
	}
	cpuRow("tandem-webhook", hookCPU, perHook)
	cpuRow("floor webhook", floorCPU, perFloor)
	cpuRow("kube-apiserver", apiCPU, fmt.Sprintf("%s per pod, all kinds", fmtSeconds(apiCPU/float64(max(1, a.n+bb.n+c.n)))))
	cpuRow("etcd", after.cpuEtcd-before.cpuEtcd, "")
	cpuRow("this benchmark", after.cpuSelf-before.cpuSelf, "(the client: encoding, TLS, goroutines)")
	fmt.Println()
}

// printVerdict prints the notes, the errors and the verdict, and returns the verdict's miss as an error.
func (m *measurement) printVerdict(st [kinds]stats) error {
	a, bb, c := st[kindPlain], st[kindWebhook], st[kindFloor]
	if note := busyNote(m.loadBefore, m.machine.CPUs, max(a.lagMax, bb.lagMax, c.lagMax)); note != "" {
		fmt.Println(note)
	}
	failed := a.failed + bb.failed + c.failed
	warmFailed := 0
	for _, w := range m.warm {
		if w.err != nil {
			warmFailed++
		}
	}
	if warmFailed > 0 {
		fmt.Printf("warm-up: %d of %d requests failed\n", warmFailed, len(m.warm))
	}
	printErrors(st)
	if !m.o.aa {
		fmt.Printf("target: tandem-webhook adds ≤ %s at p99 over the leanest webhook (B − C)\n", figures.Duration(m.o.target))
	}
	j := judge(st, m.o.target, failed+warmFailed, m.o.aa)
	fmt.Println(j.line)
	if !j.ok {
		return errors.New(strings.TrimPrefix(j.line, "verdict: "))
	}
	return nil
}
