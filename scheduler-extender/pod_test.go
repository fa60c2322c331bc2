package extender

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/resource/qos"
)

func TestDemandOf(t *testing.T) {
	t.Parallel()
	always := corev1.ContainerRestartPolicyAlways
	req := func(kv ...string) corev1.ResourceRequirements {
		rl := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			rl[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return corev1.ResourceRequirements{Requests: rl}
	}
	def := DefaultConfig().DefaultEstimatedUsage
	tests := []struct {
		name string
		pod  *corev1.Pod
		want demand
	}{
		{
			name: "batch pod: batch requests are its estimate",
			pod: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Resources: req(string(nodemetric.ResourceBatchCPU), "1500", string(nodemetric.ResourceBatchMemory), "2Gi")},
				{Resources: req(string(nodemetric.ResourceBatchCPU), "500")},
			}}},
			want: demand{batchCPU: 2000, batchMemory: 2 * gi, estCPU: 2000, estMemory: 2 * gi, be: true},
		},
		{
			name: "service pod with requests",
			pod:  &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: req("cpu", "1500m", "memory", "1Gi")}}}},
			want: demand{estCPU: 1500, estMemory: gi},
		},
		{
			name: "no requests: the configured defaults, and BestEffort is BE",
			pod:  &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}},
			want: demand{estCPU: def.CPUMilli, estMemory: def.MemoryBytes, be: true},
		},
		{
			name: "koordinator BE label",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{qos.LabelKoordinator: string(qos.BE)}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Resources: req("cpu", "1")}}},
			},
			want: demand{estCPU: 1000, estMemory: def.MemoryBytes, be: true},
		},
		{
			name: "koordinator label read as the node reads it: case and spaces do not matter",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{qos.LabelKoordinator: " be"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Resources: req("cpu", "1")}}},
			},
			want: demand{estCPU: 1000, estMemory: def.MemoryBytes, be: true},
		},
		{
			name: "koordinator LS label overrides BestEffort",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{qos.LabelKoordinator: string(qos.LS)}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{}}},
			},
			want: demand{estCPU: def.CPUMilli, estMemory: def.MemoryBytes},
		},
		{
			name: "openFuyao BE annotation",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{qos.AnnotationOpenFuyao: string(qos.BE)}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Resources: req("cpu", "1")}}},
			},
			want: demand{estCPU: 1000, estMemory: def.MemoryBytes, be: true},
		},
		{
			name: "the label wins over the annotation, as on the node",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{qos.LabelKoordinator: string(qos.LS)},
					Annotations: map[string]string{qos.AnnotationOpenFuyao: string(qos.BE)},
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: req("cpu", "1")}}},
			},
			want: demand{estCPU: 1000, estMemory: def.MemoryBytes},
		},
		{
			name: "openFuyao LS annotation overrides BestEffort",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{qos.AnnotationOpenFuyao: string(qos.LS)}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{}}},
			},
			want: demand{estCPU: def.CPUMilli, estMemory: def.MemoryBytes},
		},
		{
			name: "a label value the node refuses is not BE",
			pod: &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{qos.LabelKoordinator: "batch"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{}}},
			},
			want: demand{estCPU: def.CPUMilli, estMemory: def.MemoryBytes},
		},
		{
			name: "init containers need room while they run, sidecars for the pod's life, overhead on top",
			pod: &corev1.Pod{Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{
					{Resources: req("cpu", "100m")},
					{Resources: req("cpu", "200m"), RestartPolicy: &always},
					{Resources: req("cpu", "3")}, // 3000m + 200m sidecar running beside it
				},
				Containers: []corev1.Container{{Resources: req("cpu", "1", "memory", "1Gi")}},
				Overhead:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
			}},
			want: demand{estCPU: 3250, estMemory: gi},
		},
		{
			name: "pod-level requests win",
			pod: &corev1.Pod{Spec: corev1.PodSpec{
				Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")}},
				Containers: []corev1.Container{{Resources: req("cpu", "1", "memory", "1Gi")}},
			}},
			want: demand{estCPU: 4000, estMemory: gi},
		},
		{
			name: "DaemonSet pod",
			pod:  testPod{name: "ds", daemonSet: true, requests: map[corev1.ResourceName]string{"cpu": "100m", "memory": "64Mi"}}.build(),
			want: demand{estCPU: 100, estMemory: 64 << 20, daemonSet: true},
		},
		{
			name: "system-node-critical pod",
			pod:  testPod{name: "dns", priority: ptrInt32(2000001000), requests: map[corev1.ResourceName]string{"cpu": "100m", "memory": "64Mi"}}.build(),
			want: demand{estCPU: 100, estMemory: 64 << 20, critical: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := demandOf(tt.pod, def); got != tt.want {
				t.Fatalf("demandOf() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRunningSince(t *testing.T) {
	t.Parallel()
	started := func(ago time.Duration) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(testNow.Add(-ago))}}}
	}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	tests := []struct {
		name   string
		status corev1.PodStatus
		want   time.Time
	}{
		{"pending", corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting}}, time.Time{}},
		{"one container still starting", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{started(time.Hour), waiting}}, time.Time{}},
		{"the last container to start counts", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{started(time.Hour), started(time.Minute)}}, testNow.Add(-time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := runningSince(&corev1.Pod{Status: tt.status}); !got.Equal(tt.want) {
				t.Fatalf("runningSince() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestTrimKeepsWhatTheCacheReads guards the informer transforms: a pod or node reduced by them
// must produce the same figures as the original.
func TestTrimKeepsWhatTheCacheReads(t *testing.T) {
	t.Parallel()
	owned := batchPod("be", "n1", "1500", "2Gi")
	owned.controller = "job"
	pod := withRunning(owned, time.Minute).build()
	pod.Labels = map[string]string{qos.LabelKoordinator: string(qos.BE), "app": "spark"}
	pod.Spec.Volumes = []corev1.Volume{{Name: "data"}}
	trimmed, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	tp := trimmed.(*corev1.Pod)
	def := DefaultConfig().DefaultEstimatedUsage
	if demandOf(tp, def) != demandOf(pod, def) || !runningSince(tp).Equal(runningSince(pod)) || tp.Spec.NodeName != "n1" || tp.UID != pod.UID {
		t.Fatalf("trimmed pod %+v lost data", tp)
	}
	// What tells whether a bound pod took a reservation (heldRoom.takenBy).
	if ref := metav1.GetControllerOf(tp); ref == nil || ref.UID != "uid-job" || ref.Kind != "ReplicaSet" || !tp.CreationTimestamp.Equal(&pod.CreationTimestamp) {
		t.Fatalf("trimmed pod %+v lost its controller or creation time", tp.ObjectMeta)
	}
	if len(tp.Spec.Volumes) != 0 || tp.Labels["app"] != "" {
		t.Errorf("trimmed pod kept fields the cache does not read")
	}

	node := testNode{name: "n1", metric: metricAt(0, 1, 2, 0, 0, 3, 4), thresholds: `{"cpu":50}`, batchCPU: 10, batchMemory: 20}.build(t)
	node.Annotations["unrelated"] = "x"
	node.Status.Images = []corev1.ContainerImage{{Names: []string{"big"}}}
	trimmedNode, err := trimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	c := newNodeCache(DefaultConfig())
	a, _ := c.buildNode(node)
	b, _ := c.buildNode(trimmedNode.(*corev1.Node))
	if a.metric == nil || *a.metric != *b.metric || a.thresholds != b.thresholds || a.allocBatchCPU != b.allocBatchCPU || a.allocCPU != b.allocCPU {
		t.Fatalf("trimmed node state %+v differs from %+v", b, a)
	}
	if len(trimmedNode.(*corev1.Node).Status.Images) != 0 {
		t.Errorf("trimmed node kept its image list")
	}
}
