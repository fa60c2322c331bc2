package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/resource/qos"
)

// The namespaces of the workload: services (LS) and batch jobs, whose pods a
// ClusterColocationProfile turns BE. The shipped webhook configuration sends tandem-webhook the pods
// of both, as of every namespace but kube-system and Tandem's own.
const (
	nsLS         = "scale-services"
	nsBatch      = "scale-batch"
	batchNSLabel = "scale.tandem.io/colocation"
	runLabel     = "scale.tandem.io/phase"
	priorityName = "koord-batch"
)

// createBase creates the PriorityClass the profile names, the namespaces and their default
// ServiceAccounts (no kube-controller-manager runs to make them, and the ServiceAccount admission
// plugin refuses pods without one).
func createBase(ctx context.Context, cs kubernetes.Interface) error {
	if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: priorityName}, Value: 5000,
		Description: "Koordinator's batch band (5000-5999), as in deploy/priorityclasses.yaml",
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create PriorityClass %s: %w", priorityName, err)
	}
	for _, ns := range []struct {
		name   string
		labels map[string]string
	}{
		{nsLS, map[string]string{"team": "shop"}},
		{nsBatch, map[string]string{"team": "data", batchNSLabel: "batch"}},
	} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.name, Labels: ns.labels}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns.name, err)
		}
		if _, err := cs.CoreV1().ServiceAccounts(ns.name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ServiceAccount %s/default: %w", ns.name, err)
		}
	}
	return nil
}

// batchProfile is what an application team writes to colocate its jobs: every pod of the batch
// namespace becomes BE in Koordinator's batch band, placed by the koord-scheduler profile.
func batchProfile() admission.ClusterColocationProfile {
	return admission.ClusterColocationProfile{
		TypeMeta:   metav1.TypeMeta{APIVersion: "config.koordinator.sh/v1alpha1", Kind: "ClusterColocationProfile"},
		ObjectMeta: metav1.ObjectMeta{Name: "batch-jobs"},
		Spec: admission.ClusterColocationProfileSpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{batchNSLabel: "batch"}},
			QoSClass:          "BE", PriorityClassName: priorityName, SchedulerName: "koord-scheduler",
		},
	}
}

func createProfile(ctx context.Context, dyn dynamic.Interface) error {
	b, err := json.Marshal(batchProfile())
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	var last error
	for range 50 {
		if _, last = dyn.Resource(admission.ProfileResource).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); last == nil {
			return nil
		}
		if err := runctx.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("create ClusterColocationProfile: %w", last)
}

// podKind is one kind of pod the workload creates.
type podKind int

const (
	kindLS       podKind = iota // a service replica
	kindBatch                   // a batch executor: half a core
	kindBatchBig                // a large batch executor: 8 cores, which only cold nodes fit
)

func (k podKind) String() string { return [...]string{"LS", "batch", "batch-large"}[k] }

func (k podKind) batch() bool { return k != kindLS }

// cores and memory each kind requests.
func (k podKind) request() (cpu, mem string) {
	switch k {
	case kindBatch:
		// Small enough that a warm node's batch capacity (about 6 cores) takes 11 of them, so that
		// 1000 nodes hold the 10000-pod burst's batch half.
		return "500m", "1Gi"
	case kindBatchBig:
		return "8", "8Gi"
	}
	return "500m", "512Mi"
}

// newPod is the pod as its owner submits it. Batch pods are submitted as plain pods, for the
// profile to convert (converted false); without Tandem they are created in the form the webhook
// would have given them (converted true), so that kube-scheduler does the same fitting work.
func newPod(k podKind, name, phase string, converted bool) *corev1.Pod {
	cpu, mem := k.request()
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{runLabel: phase, "app": "web", "team": "shop"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example.com/shop/web:1.42.0",
				Resources: corev1.ResourceRequirements{Requests: req, Limits: req},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if !k.batch() {
		p.Namespace = nsLS
		return p
	}
	p.Namespace = nsBatch
	p.Labels["app"], p.Labels["team"] = "etl", "data"
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].Name, p.Spec.Containers[0].Image = "executor", "registry.example.com/spark:3.5.4"
	if converted {
		p.Labels[qos.LabelKoordinator] = "BE"
		p.Spec.PriorityClassName = priorityName
		p.Spec.SchedulerName = "koord-scheduler"
		cpuQ := resource.MustParse(cpu)
		br := corev1.ResourceList{
			nodemetric.ResourceBatchCPU:    *resource.NewQuantity(cpuQ.MilliValue(), resource.DecimalSI),
			nodemetric.ResourceBatchMemory: resource.MustParse(mem),
		}
		p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: br, Limits: br.DeepCopy()}
	}
	return p
}

// sameConversion checks that the webhook gave a batch pod the form the run without Tandem creates
// directly: otherwise the two settings would not schedule the same pods.
func sameConversion(got *corev1.Pod, k podKind) error {
	want := newPod(k, got.Name, got.Labels[runLabel], true)
	switch {
	case got.Spec.PriorityClassName != want.Spec.PriorityClassName, got.Spec.SchedulerName != want.Spec.SchedulerName:
		return fmt.Errorf("pod %s admitted with priorityClassName %q, schedulerName %q; want %q, %q", got.Name,
			got.Spec.PriorityClassName, got.Spec.SchedulerName, want.Spec.PriorityClassName, want.Spec.SchedulerName)
	case got.Labels[qos.LabelKoordinator] != "BE":
		return fmt.Errorf("pod %s admitted without %s=BE", got.Name, qos.LabelKoordinator)
	}
	g, w := got.Spec.Containers[0].Resources.Requests, want.Spec.Containers[0].Resources.Requests
	if len(g) != len(w) {
		return fmt.Errorf("pod %s admitted with requests %v, want %v", got.Name, g, w)
	}
	for name, q := range w {
		if gq, ok := g[name]; !ok || gq.Cmp(q) != 0 {
			return fmt.Errorf("pod %s admitted with requests %v, want %v", got.Name, g, w)
		}
	}
	return nil
}

// tracker records, by pod name, when each pod was sent and when it was first seen bound.
type tracker struct {
	mu       sync.Mutex
	sent     map[string]time.Time
	bound    map[string]time.Time
	node     map[string]string
	kind     map[string]podKind
	req      map[string]int64       // batch-cpu milli a batch pod requests (after the webhook)
	usage    map[string]boundUsage  // by node: what the pods bound there use
	placed   map[string][]time.Time // by node: when pods were bound there
	first    chan *corev1.Pod       // the first batch pod seen, for sameConversion
	gotFirst bool
}

func newTracker() *tracker {
	return &tracker{sent: map[string]time.Time{}, bound: map[string]time.Time{}, node: map[string]string{},
		kind: map[string]podKind{}, req: map[string]int64{}, usage: map[string]boundUsage{}, placed: map[string][]time.Time{}, first: make(chan *corev1.Pod, 1)}
}

func (t *tracker) sending(name string, k podKind, at time.Time) {
	t.mu.Lock()
	t.sent[name], t.kind[name] = at, k
	t.mu.Unlock()
}

func (t *tracker) seen(p *corev1.Pod, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.Namespace == nsBatch && !t.gotFirst {
		t.gotFirst = true
		t.first <- p.DeepCopy()
	}
	if p.Spec.NodeName == "" {
		return
	}
	if _, ok := t.bound[p.Name]; ok {
		return
	}
	t.bound[p.Name], t.node[p.Name] = at, p.Spec.NodeName
	u := t.usage[p.Spec.NodeName]
	r := p.Spec.Containers[0].Resources.Requests
	if q, ok := r[nodemetric.ResourceBatchCPU]; ok {
		t.req[p.Name] = q.Value()
		mem := r[nodemetric.ResourceBatchMemory]
		u.be.CPUMilli += int64(beUseOfRequest * float64(q.Value()))
		u.be.MemoryBytes += int64(beUseOfRequest * float64(mem.Value()))
	} else {
		u.ls.CPUMilli += int64(lsUseOfRequest * float64(r.Cpu().MilliValue()))
		u.ls.MemoryBytes += int64(lsUseOfRequest * float64(r.Memory().Value()))
	}
	t.usage[p.Spec.NodeName] = u
	t.placed[p.Spec.NodeName] = append(t.placed[p.Spec.NodeName], at)
}

// placedAt is when pods were bound to node.
func (t *tracker) placedAt(node string) []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.placed[node]...)
}

// boundUsage is what the pods bound to node use, for its simulated agent.
func (t *tracker) boundUsage(node string) boundUsage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.usage[node]
}

// watch records bound pods of both namespaces until ctx ends. A RetryWatcher resumes after the
// API server closes a watch, so no binding is missed.
func (t *tracker) watch(ctx context.Context, cs kubernetes.Interface) error {
	list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: runLabel, ResourceVersion: "0", Limit: 1})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = runLabel
			return cs.CoreV1().Pods("").Watch(ctx, o)
		},
	})
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if p, isPod := ev.Object.(*corev1.Pod); isPod && (ev.Type == watch.Added || ev.Type == watch.Modified) {
					t.seen(p, time.Now())
				}
			}
		}
	}()
	return nil
}

// phaseResult is one phase's figures.
type phaseResult struct {
	name        string
	pods, bound int
	first, last time.Time // first send, last binding
	sent        time.Time // when the last create returned
	// createCalls are the create requests' round trips as the clients saw them: admission (the
	// webhooks included) and storage, and any wait for a CPU on the way.
	createCalls  []time.Duration
	latencies    []time.Duration
	sendErrors   int
	firstSendErr error
}

// createRate is how fast the clients got their pods created: admission, webhooks included, and
// storage; past it nothing can be scheduled faster.
func (r phaseResult) createRate() float64 {
	if !r.sent.After(r.first) {
		return 0
	}
	return float64(r.pods-r.sendErrors) / r.sent.Sub(r.first).Seconds()
}

func (r phaseResult) throughput() float64 {
	if r.bound == 0 || !r.last.After(r.first) {
		return 0
	}
	return float64(r.bound) / r.last.Sub(r.first).Seconds()
}

// spec is one phase's pods: how many of each kind, and how they are sent.
type spec struct {
	name  string
	kinds []podKind // the kind of pod i is kinds[i%len(kinds)]
	n     int
	rate  float64 // pods/s, open loop; 0: a burst, as fast as burstWorkers creates
}

const burstWorkers = 32

// runPhase creates the phase's pods and waits until all are bound or timeout passes.
func runPhase(ctx context.Context, cs kubernetes.Interface, t *tracker, sp spec, converted bool, timeout time.Duration) phaseResult {
	res := phaseResult{name: sp.name, pods: sp.n}
	names := make([]string, sp.n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%05d", sp.name, i)
	}
	var errs atomic.Int64
	var errMu sync.Mutex
	// create sends pod i; at is when it counts as sent: the intended time in the open loop, so that
	// neither a slow API server nor a late dispatcher hides a queue.
	create := func(i int, at time.Time) {
		k := sp.kinds[i%len(sp.kinds)]
		p := newPod(k, names[i], sp.name, converted)
		t.sending(p.Name, k, at)
		callStart := time.Now()
		_, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		errMu.Lock()
		res.createCalls = append(res.createCalls, time.Since(callStart))
		errMu.Unlock()
		if err != nil {
			errs.Add(1)
			errMu.Lock()
			if res.firstSendErr == nil {
				res.firstSendErr = err
			}
			errMu.Unlock()
		}
	}
	start := time.Now()
	res.first = start
	var wg sync.WaitGroup
	if sp.rate > 0 {
		for i := range sp.n {
			due := start.Add(time.Duration(float64(i) / sp.rate * float64(time.Second)))
			if sleepUntil(ctx, due) != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				create(i, due)
			}()
		}
	} else {
		// create records its own errors; parallel only stops early when ctx ends.
		_ = parallel(ctx, sp.n, burstWorkers, func(i int) error {
			create(i, time.Now())
			return nil
		})
	}
	wg.Wait()
	res.sent = time.Now()
	res.sendErrors = int(errs.Load())
	deadline := time.Now().Add(timeout)
	lastCount, lastChange := -1, time.Now()
	for {
		bound := t.countBound(names)
		if bound >= sp.n-res.sendErrors {
			break
		}
		if bound != lastCount {
			lastCount, lastChange = bound, time.Now()
		}
		// Past the deadline, or a minute without a single new binding: the rest stay Pending.
		if time.Now().After(deadline) || time.Since(lastChange) > time.Minute || ctx.Err() != nil {
			break
		}
		_ = runctx.Sleep(ctx, 500*time.Millisecond)
	}
	t.mu.Lock()
	for _, n := range names {
		b, ok := t.bound[n]
		if !ok {
			continue
		}
		res.bound++
		res.latencies = append(res.latencies, b.Sub(t.sent[n]))
		if b.After(res.last) {
			res.last = b
		}
	}
	t.mu.Unlock()
	return res
}

func (t *tracker) countBound(names []string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, name := range names {
		if _, ok := t.bound[name]; ok {
			n++
		}
	}
	return n
}
