package extender

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// now is the clock of every test; metrics are dated relative to it.
var testNow = time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC)

const gi = int64(1) << 30

// testNode is a node with 8 CPUs and 32 GiB allocatable, an optional metric and batch allocatable.
type testNode struct {
	name        string
	metric      *nodemetric.NodeMetric
	rawMetric   string // used instead of metric when set
	thresholds  string // tandem.io/usage-thresholds
	batchCPU    int64  // -1: no batch allocatable
	batchMemory int64
}

func (n testNode) build(t testing.TB) *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, UID: types.UID("uid-" + n.name), Annotations: map[string]string{}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("8"),
			corev1.ResourceMemory: *resource.NewQuantity(32*gi, resource.BinarySI),
			corev1.ResourcePods:   resource.MustParse("110"),
		}},
	}
	if n.batchCPU >= 0 {
		node.Status.Allocatable[nodemetric.ResourceBatchCPU] = *resource.NewQuantity(n.batchCPU, resource.DecimalSI)
		node.Status.Allocatable[nodemetric.ResourceBatchMemory] = *resource.NewQuantity(n.batchMemory, resource.BinarySI)
	}
	if n.metric != nil {
		v, err := nodemetric.Marshal(n.metric)
		if err != nil {
			t.Fatal(err)
		}
		node.Annotations[nodemetric.AnnotationKey] = v
	}
	if n.rawMetric != "" {
		node.Annotations[nodemetric.AnnotationKey] = n.rawMetric
	}
	if n.thresholds != "" {
		node.Annotations[UsageThresholdsAnnotation] = n.thresholds
	}
	return node
}

// metricAt is a metric sampled age before testNow with a 60s window.
func metricAt(age time.Duration, cpuMilli, memory, hpCPU, hpMemory, reclaimCPU, reclaimMemory int64) *nodemetric.NodeMetric {
	return &nodemetric.NodeMetric{
		UpdateTime:            testNow.Add(-age),
		ReportIntervalSeconds: 60,
		NodeUsage:             nodemetric.Resources{CPUMilli: cpuMilli, MemoryBytes: memory},
		HPUsage:               nodemetric.Resources{CPUMilli: hpCPU, MemoryBytes: hpMemory},
		Reclaimable:           nodemetric.Resources{CPUMilli: reclaimCPU, MemoryBytes: reclaimMemory},
	}
}

// testPod builds a pod; requests maps resource name to quantity text.
type testPod struct {
	name     string
	node     string
	requests map[corev1.ResourceName]string
	// runningFor > 0 makes the pod Running with its container started that long before testNow.
	runningFor time.Duration
	labels     map[string]string
	daemonSet  bool
	priority   *int32
	// controller names the ReplicaSet controlling the pod (UID "uid-" + controller).
	controller string
	// created is the pod's creation time; zero is testNow minus an hour.
	created time.Time
}

func (p testPod) build() *corev1.Pod {
	rl := corev1.ResourceList{}
	for k, v := range p.requests {
		rl[k] = resource.MustParse(v)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", UID: types.UID("uid-" + p.name), Labels: p.labels},
		Spec: corev1.PodSpec{
			NodeName:   p.node,
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:1", Resources: corev1.ResourceRequirements{Requests: rl}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	pod.Spec.Priority = p.priority
	pod.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Hour))
	if !p.created.IsZero() {
		pod.CreationTimestamp = metav1.NewTime(p.created)
	}
	if p.controller != "" {
		yes := true
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: p.controller, UID: types.UID("uid-" + p.controller), Controller: &yes}}
	}
	if p.daemonSet {
		yes := true
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds", Controller: &yes}}
	}
	if p.runningFor > 0 {
		pod.Status.Phase = corev1.PodRunning
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name:  "main",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(testNow.Add(-p.runningFor))}},
		}}
	}
	return pod
}

// batchPod asks for batch resources only, as Koordinator's BE pods do.
func batchPod(name, node, cpuMilli, memory string) testPod {
	return testPod{name: name, node: node, requests: map[corev1.ResourceName]string{
		nodemetric.ResourceBatchCPU: cpuMilli, nodemetric.ResourceBatchMemory: memory,
	}}
}

// lsPod asks for ordinary cpu and memory.
func lsPod(name, node, cpu, memory string) testPod {
	return testPod{name: name, node: node, requests: map[corev1.ResourceName]string{
		corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory,
	}}
}

func ptrInt32(v int32) *int32 { return &v }
