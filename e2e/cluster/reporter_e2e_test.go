//go:build e2e

package cluster_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/kubeclient"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/metrics/reporter"
)

const (
	// The node the synthetic collector describes: 2 cores and 4 GiB,
	// whatever the machine has, so the expected figures do not depend on
	// the host. The reservation (capacity − allocatable) is the real Node's.
	reporterCapacityCPU    = 2000    // milli-cores
	reporterCapacityMemory = 4 << 30 // bytes
	// reporterSamplePeriod is how far the fake clock moves per Step, one
	// collector sample each.
	reporterSamplePeriod = 5 * time.Second
	reporterLSPod        = "reporter-e2e-ls"
	reporterBEPod        = "reporter-e2e-be"
	// kubeletHeartbeatWait bounds the wait for kubelet's next status update
	// (nodeStatusUpdateFrequency is 5s in this cluster).
	kubeletHeartbeatWait = 60 * time.Second
)

// reporterLoad is what the synthetic collector measures: the system, one LS
// (high-priority) pod and one BE pod, steady until the test changes it.
type reporterLoad struct {
	system, ls, be reclaim.Resources
}

func (l reporterLoad) node() reclaim.Resources {
	return reclaim.Resources{
		CPUMilli:    l.system.CPUMilli + l.ls.CPUMilli + l.be.CPUMilli,
		MemoryBytes: l.system.MemoryBytes + l.ls.MemoryBytes + l.be.MemoryBytes,
	}
}

// reporterRig drives a real reporter.Reporter against the cluster's API
// server. Only the collector and the clock are synthetic: the collector
// because its figures must be known to check the formula's output, the
// clock because warm-up, aggregation window and refresh are minutes long.
type reporterRig struct {
	t        *testing.T
	cs       kubernetes.Interface
	clock    *clocktesting.FakeClock
	counter  *patchCounter
	rep      *reporter.Reporter
	load     reporterLoad
	settings slo.ColocationSettings
	reserved reclaim.Resources
}

// advance moves the fake clock by d, one sample period per Step.
func (r *reporterRig) advance(ctx context.Context, d time.Duration) {
	for end := r.clock.Now().Add(d); r.clock.Now().Before(end); {
		r.clock.Step(reporterSamplePeriod)
		r.rep.Step(ctx)
	}
}

// expected is the batch capacity the formula gives for the current load,
// every HP pod counted by its (steady) usage, which is its predicted peak.
func (r *reporterRig) expected() reclaim.Result {
	return reclaim.Compute(reclaim.SettingsFrom(r.settings), reclaim.Input{
		Capacity:    reclaim.Resources{CPUMilli: reporterCapacityCPU, MemoryBytes: reporterCapacityMemory},
		SystemUsage: r.load.system,
		Reserved:    r.reserved,
		HP:          []reclaim.Pod{{UID: reporterLSPod, Usage: r.load.ls}},
	})
}

// patchCounter counts the PATCH requests that reach the API server through
// the reporter's clientset.
type patchCounter struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *patchCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPatch {
		c.n.Add(1)
	}
	return c.next.RoundTrip(req)
}

func (r *reporterRig) patches() int64 { return r.counter.n.Load() }

func (r *reporterRig) getNode(ctx context.Context) *corev1.Node {
	r.t.Helper()
	n, err := r.cs.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		r.t.Fatalf("get node %s: %v", cluster.NodeName, err)
	}
	return n
}

// batchOnNode reads kubernetes.io/batch-{cpu,memory} from one resource list;
// ok is false when either is missing.
func batchOnNode(list corev1.ResourceList) (reclaim.Resources, bool) {
	cpu, okc := list[nodemetric.ResourceBatchCPU]
	mem, okm := list[nodemetric.ResourceBatchMemory]
	// batch-cpu counts milli-cores as whole units.
	return reclaim.Resources{CPUMilli: cpu.Value(), MemoryBytes: mem.Value()}, okc && okm
}

// checkPublished fails unless the Node carries want in both capacity and
// allocatable, and the node-metric annotation parses and says want too.
func (r *reporterRig) checkPublished(node *corev1.Node, want reclaim.Resources) {
	r.t.Helper()
	for _, l := range []struct {
		name string
		list corev1.ResourceList
	}{{"capacity", node.Status.Capacity}, {"allocatable", node.Status.Allocatable}} {
		got, ok := batchOnNode(l.list)
		if !ok {
			r.t.Errorf("node status.%s has no batch resources: %v", l.name, l.list)
			continue
		}
		if got != want {
			r.t.Errorf("node status.%s batch = %+v, want %+v", l.name, got, want)
		}
	}
	m, err := nodemetric.FromNode(node)
	if err != nil {
		r.t.Fatalf("node-metric annotation: %v", err)
	}
	if m.Reclaimable != want {
		r.t.Errorf("annotation reclaimable = %+v, want %+v (the status)", m.Reclaimable, want)
	}
}

// checkUsage fails unless the annotation reports the steady load, written
// from a sample taken in [since, now].
func (r *reporterRig) checkUsage(node *corev1.Node, since time.Time) {
	r.t.Helper()
	m, err := nodemetric.FromNode(node)
	if err != nil {
		r.t.Fatalf("node-metric annotation: %v", err)
	}
	want := nodemetric.NodeMetric{
		UpdateTime:            m.UpdateTime,
		ReportIntervalSeconds: r.settings.MetricReportIntervalSeconds,
		NodeUsage:             r.load.node(),
		HPUsage:               r.load.ls, // the BE pod is not high-priority
		Reclaimable:           m.Reclaimable,
	}
	if m.UpdateTime.Before(since) || m.UpdateTime.After(r.clock.Now()) {
		r.t.Errorf("annotation updateTime = %s, want a sample's time in [%s, %s]", m.UpdateTime, since, r.clock.Now())
	}
	if *m != want {
		r.t.Errorf("annotation = %+v, want %+v", *m, want)
	}
}

// kubeletOwned is the status kubelet keeps: every capacity and allocatable
// resource except the batch ones, and the condition types.
type kubeletOwned struct {
	capacity, allocatable corev1.ResourceList
	conditions            []corev1.NodeConditionType
}

func kubeletStatus(n *corev1.Node) kubeletOwned {
	strip := func(l corev1.ResourceList) corev1.ResourceList {
		out := l.DeepCopy()
		delete(out, nodemetric.ResourceBatchCPU)
		delete(out, nodemetric.ResourceBatchMemory)
		return out
	}
	k := kubeletOwned{capacity: strip(n.Status.Capacity), allocatable: strip(n.Status.Allocatable)}
	for _, c := range n.Status.Conditions {
		k.conditions = append(k.conditions, c.Type)
	}
	return k
}

func sameResources(a, b corev1.ResourceList) bool {
	return maps.EqualFunc(a, b, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 })
}

func readyCondition(n *corev1.Node) (corev1.NodeCondition, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c, true
		}
	}
	return corev1.NodeCondition{}, false
}

// seed004Colocation is colocation-config of the operator's seed 004 as it
// resolves for node, with colocation enabled (seed 004 ships it off).
func seed004Colocation(t *testing.T, node *corev1.Node) slo.ColocationSettings {
	t.Helper()
	raw, err := os.ReadFile(repoPath(t, "config/slo/testdata/seed004.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := slo.ParseFile(raw)
	if err != nil {
		t.Fatalf("parse seed 004: %v", err)
	}
	res, err := cfg.ForNode(node.Labels)
	if err != nil {
		t.Fatalf("resolve seed 004 for node %s: %v", node.Name, err)
	}
	s := res.Colocation
	s.Enable = true
	return s
}

// TestReporterPublishesToRealAPIServer runs the node reporter against the
// cluster's API server and kubelet, with seed 004's colocation knobs: batch
// capacity reaches status.capacity and status.allocatable after the warm-up
// and matches the formula, the node-metric annotation agrees, kubelet's next
// status update keeps both its own fields and the batch resources, a steady
// load writes nothing, a step in load past the threshold publishes the new
// value, and disabling colocation removes the batch resources.
func TestReporterPublishesToRealAPIServer(t *testing.T) {
	ctx := testContext(t, 10*time.Minute)
	cs := client(t)
	// The reporter gets a client of its own from the cluster's kubeconfig,
	// whose transport counts its PATCH requests.
	restCfg, err := clientcmd.BuildConfigFromFlags("", suite.c.Kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", suite.c.Kubeconfig, err)
	}
	counter := &patchCounter{}
	restCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	})
	// The client tandem-proxy gives its reporter, here against a real kube-apiserver.
	reporterClient, err := kubeclient.New(restCfg, "tandem-e2e")
	if err != nil {
		t.Fatalf("API client for the reporter: %v", err)
	}
	// Remove anything an earlier (killed) run left, and everything this one
	// writes, whatever happens below.
	restoreNode(ctx, t, cs)
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		restoreNode(ctx, t, cs)
		n, err := cs.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("get node after clean-up: %v", err)
			return
		}
		if _, ok := n.Annotations[nodemetric.AnnotationKey]; ok {
			t.Errorf("annotation %s still on the node after clean-up", nodemetric.AnnotationKey)
		}
		for _, l := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			if _, ok := l[nodemetric.ResourceBatchCPU]; ok {
				t.Errorf("batch resources still on the node after clean-up: %v", l)
			}
		}
	})

	before, err := cs.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	kubeletBefore := kubeletStatus(before)
	start := time.Now().UTC().Truncate(time.Second)
	r := &reporterRig{
		t:        t,
		cs:       cs,
		counter:  counter,
		clock:    clocktesting.NewFakeClock(start),
		settings: seed004Colocation(t, before),
		load: reporterLoad{
			system: reclaim.Resources{CPUMilli: 200, MemoryBytes: 512 << 20},
			ls:     reclaim.Resources{CPUMilli: 300, MemoryBytes: 1 << 30},
			be:     reclaim.Resources{CPUMilli: 400, MemoryBytes: 256 << 20},
		},
		reserved: reclaim.Resources{
			CPUMilli:    before.Status.Capacity.Cpu().MilliValue() - before.Status.Allocatable.Cpu().MilliValue(),
			MemoryBytes: before.Status.Capacity.Memory().Value() - before.Status.Allocatable.Memory().Value(),
		},
	}
	t.Logf("seed 004 colocation-config (enabled): %+v; node reserved %+v", r.settings, r.reserved)
	r.rep, err = reporter.New(reporter.Config{NodeName: cluster.NodeName}, reporter.Deps{
		Client: reporterClient,
		Samples: func() *reporter.Sample {
			return &reporter.Sample{
				Time:     r.clock.Now(),
				Capacity: reclaim.Resources{CPUMilli: reporterCapacityCPU, MemoryBytes: reporterCapacityMemory},
				Node:     r.load.node(),
				System:   r.load.system,
				Pods: []reporter.PodUsage{
					{UID: reporterLSPod, QoS: "LS", Usage: r.load.ls},
					{UID: reporterBEPod, QoS: reporter.QoSBE, Usage: r.load.be},
				},
			}
		},
		Settings: func() slo.ColocationSettings { return r.settings },
		Clock:    r.clock,
	})
	if err != nil {
		t.Fatalf("new reporter: %v", err)
	}
	interval := time.Duration(r.settings.MetricReportIntervalSeconds) * time.Second

	var published reclaim.Resources
	if !t.Run("nothing before the warm-up, then the formula's value", func(t *testing.T) {
		r.t = t
		r.advance(ctx, interval/2)
		n := r.getNode(ctx)
		if got, ok := batchOnNode(n.Status.Allocatable); ok {
			t.Fatalf("batch resources published %s into a %s warm-up: %+v", interval/2, interval, got)
		}
		if _, ok := n.Annotations[nodemetric.AnnotationKey]; ok {
			t.Fatalf("node-metric annotation written during the warm-up")
		}

		// Step up to the first write: it must come once the samples span
		// the warm-up (metricReportIntervalSeconds), and not much later.
		firstSample := start.Add(reporterSamplePeriod)
		for r.patches() == 0 && r.clock.Now().Sub(firstSample) < 2*interval {
			r.clock.Step(reporterSamplePeriod)
			r.rep.Step(ctx)
		}
		span := r.clock.Now().Sub(firstSample)
		if r.patches() == 0 {
			t.Fatalf("nothing published after %s (simulated) of samples, warm-up %s", span, interval)
		}
		if span < interval || span > interval+2*reporterSamplePeriod {
			t.Errorf("first publication after %s of samples, want the warm-up %s", span, interval)
		}
		t.Logf("first publication after %s (simulated) of samples", span)
		res := r.expected()
		published = res.Batch
		if published.CPUMilli <= 0 || published.MemoryBytes <= 0 {
			t.Fatalf("test load leaves no batch capacity (%+v); the test's figures are wrong", res)
		}
		t.Logf("formula: batch = capacity %+v − safety %+v − max(system, reserved) %+v − HP %+v = %+v",
			reclaim.Resources{CPUMilli: reporterCapacityCPU, MemoryBytes: reporterCapacityMemory}, res.Safety, res.System, res.HP, res.Batch)
		if got := r.patches(); got != 2 {
			t.Errorf("reporter sent %d PATCH requests for its first publication, want 2 (status and annotation)", got)
		}
		n = r.getNode(ctx)
		r.checkPublished(n, published)
		// Written at this very Step: its updateTime is the newest sample's.
		r.checkUsage(n, r.clock.Now())
		t.Logf("node %s: allocatable %s=%s %s=%s; annotation %s",
			n.Name, nodemetric.ResourceBatchCPU, ptrString(n.Status.Allocatable, nodemetric.ResourceBatchCPU),
			nodemetric.ResourceBatchMemory, ptrString(n.Status.Allocatable, nodemetric.ResourceBatchMemory),
			n.Annotations[nodemetric.AnnotationKey])
	}) {
		return
	}

	if !t.Run("kubelet's next status updates keep them and its own fields", func(t *testing.T) {
		r.t = t
		// kubelet may read the Node from the API server's cache: the first
		// heartbeat after the patch can come from a read older than it, the
		// second cannot.
		for i := 1; i <= 2; i++ {
			after := waitHeartbeat(ctx, t, cs, r.getNode(ctx))
			c, _ := readyCondition(after)
			if c.Status != corev1.ConditionTrue {
				t.Errorf("node Ready = %s after the reporter's patches: %s: %s", c.Status, c.Reason, c.Message)
			}
			r.checkPublished(after, published)
			got := kubeletStatus(after)
			if !sameResources(got.capacity, kubeletBefore.capacity) {
				t.Errorf("kubelet's capacity changed: before %v, after %v", kubeletBefore.capacity, got.capacity)
			}
			if !sameResources(got.allocatable, kubeletBefore.allocatable) {
				t.Errorf("kubelet's allocatable changed: before %v, after %v", kubeletBefore.allocatable, got.allocatable)
			}
			if fmt.Sprint(got.conditions) != fmt.Sprint(kubeletBefore.conditions) {
				t.Errorf("node conditions changed: before %v, after %v", kubeletBefore.conditions, got.conditions)
			}
			t.Logf("after kubelet status update %d: batch resources and annotation intact; capacity %v", i, after.Status.Capacity)
		}
	}) {
		return
	}

	t.Run("a steady load writes nothing", func(t *testing.T) {
		r.t = t
		p := r.patches()
		// Shorter than updateTimeThresholdSeconds, so no refresh is due.
		steady := time.Duration(r.settings.UpdateTimeThresholdSeconds)*time.Second - 2*interval
		r.advance(ctx, steady)
		if got := r.patches() - p; got != 0 {
			t.Errorf("%d PATCH requests in %s (simulated) of steady load, want 0", got, steady)
		}
	})

	if !t.Run("a step in load past the threshold publishes the new value", func(t *testing.T) {
		r.t = t
		old := published
		r.load.ls = reclaim.Resources{CPUMilli: 700, MemoryBytes: 1 << 30}
		published = r.expected().Batch
		moved := float64(old.CPUMilli-published.CPUMilli) / float64(old.CPUMilli)
		if moved <= r.settings.ResourceDiffThreshold {
			t.Fatalf("step moves batch-cpu by %.0f%%, not past resourceDiffThreshold %v; the test's figures are wrong", 100*moved, r.settings.ResourceDiffThreshold)
		}
		p := r.patches()
		stepAt := r.clock.Now()
		var took time.Duration
		for took < interval {
			r.clock.Step(reporterSamplePeriod)
			r.rep.Step(ctx)
			took += reporterSamplePeriod
			if r.patches() > p {
				break
			}
		}
		t.Logf("LS pod CPU 300m → 700m: batch-cpu %d → %d (%.0f%%), first write %s (simulated) after the step", old.CPUMilli, published.CPUMilli, 100*moved, took)
		if r.patches() == p {
			t.Fatalf("no PATCH within %s (simulated) of the step", interval)
		}
		r.checkPublished(r.getNode(ctx), published)
		// The annotation's usage figures are means over the report
		// interval: they reach the new load one interval later.
		r.advance(ctx, 2*interval)
		n := r.getNode(ctx)
		r.checkPublished(n, published)
		r.checkUsage(n, stepAt)
		t.Logf("annotation after %s more: %s (%d PATCH requests since the step)", 2*interval, n.Annotations[nodemetric.AnnotationKey], r.patches()-p)
	}) {
		return
	}

	t.Run("colocation disabled removes the batch resources", func(t *testing.T) {
		r.t = t
		r.settings.Enable = false
		r.advance(ctx, reporterSamplePeriod)
		n := r.getNode(ctx)
		for _, l := range []struct {
			name string
			list corev1.ResourceList
		}{{"capacity", n.Status.Capacity}, {"allocatable", n.Status.Allocatable}} {
			for _, name := range []corev1.ResourceName{nodemetric.ResourceBatchCPU, nodemetric.ResourceBatchMemory} {
				if q, ok := l.list[name]; ok {
					t.Errorf("status.%s still has %s=%s with colocation disabled", l.name, name, q.String())
				}
			}
		}
		m, err := nodemetric.FromNode(n)
		if err != nil {
			t.Fatalf("node-metric annotation: %v", err)
		}
		if m.Reclaimable != (reclaim.Resources{}) {
			t.Errorf("annotation reclaimable = %+v with colocation disabled, want 0", m.Reclaimable)
		}
		if got := kubeletStatus(n); !sameResources(got.allocatable, kubeletBefore.allocatable) {
			t.Errorf("removing batch resources changed kubelet's allocatable: before %v, after %v", kubeletBefore.allocatable, got.allocatable)
		}
		t.Logf("status.allocatable after disable: %v", n.Status.Allocatable)
	})
}

// waitHeartbeat waits until kubelet has written the node's status again
// after seen, that is until the Ready condition's lastHeartbeatTime moves
// past seen's, and returns the node as it then is.
func waitHeartbeat(ctx context.Context, t *testing.T, cs kubernetes.Interface, seen *corev1.Node) *corev1.Node {
	t.Helper()
	ready, ok := readyCondition(seen)
	if !ok {
		t.Fatal("node has no Ready condition")
	}
	start := time.Now()
	var after *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, time.Second, kubeletHeartbeatWait, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c, ok := readyCondition(n)
		after = n
		return ok && c.LastHeartbeatTime.After(ready.LastHeartbeatTime.Time), nil
	})
	if err != nil {
		t.Fatalf("kubelet did not update the node's Ready heartbeat (last %s) within %s; see %s: %v",
			ready.LastHeartbeatTime, kubeletHeartbeatWait, suite.c.Logs(cluster.Kubelet), err)
	}
	c, _ := readyCondition(after)
	t.Logf("kubelet heartbeat %s → %s after %s (resourceVersion %s → %s)", ready.LastHeartbeatTime.UTC().Format(time.RFC3339),
		c.LastHeartbeatTime.UTC().Format(time.RFC3339), time.Since(start).Round(time.Second), seen.ResourceVersion, after.ResourceVersion)
	return after
}

func ptrString(l corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return "<none>"
	}
	return q.String()
}
