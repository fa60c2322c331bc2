package loadaware

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	extender "github.com/tandemkit/tandem/scheduler-extender"
)

func TestDecodeArgs(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    runtime.Object
		want    func(extender.Config) bool
		wantErr string
	}{
		{name: "no args: the extender's defaults", args: nil, want: func(c extender.Config) bool { return c == extender.DefaultConfig() }},
		{name: "empty args", args: &runtime.Unknown{}, want: func(c extender.Config) bool { return c == extender.DefaultConfig() }},
		{name: "a key set, the others defaulted", args: &runtime.Unknown{Raw: []byte(`{"usageThresholds":{"cpu":50,"memory":90}}`)},
			want: func(c extender.Config) bool {
				return c.UsageThresholds.CPU == 50 && c.UsageThresholds.Memory == 90 && c.NodeMetricExpirationSeconds == extender.DefaultConfig().NodeMetricExpirationSeconds
			}},
		{name: "a typo is refused", args: &runtime.Unknown{Raw: []byte(`{"usageThreshold":{"cpu":50}}`)}, wantErr: "usageThreshold"},
		{name: "an invalid value is refused", args: &runtime.Unknown{Raw: []byte(`{"usageThresholds":{"cpu":150}}`)}, wantErr: "usageThresholds.cpu"},
		{name: "another args type is refused", args: &corev1.Pod{}, wantErr: "args of type"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(got) {
				t.Errorf("config = %+v", got)
			}
		})
	}
}

// node has 8 CPUs and 32 GiB, a metric of now-30s with cpuMilli used of which hpMilli by services,
// and batchMilli of batch capacity.
func node(t *testing.T, name string, cpuMilli, hpMilli, batchMilli int64) *corev1.Node {
	t.Helper()
	m, err := nodemetric.Marshal(&nodemetric.NodeMetric{
		UpdateTime: time.Now().Add(-30 * time.Second), ReportIntervalSeconds: 60,
		NodeUsage:   nodemetric.Resources{CPUMilli: cpuMilli, MemoryBytes: 8 << 30},
		HPUsage:     nodemetric.Resources{CPUMilli: hpMilli, MemoryBytes: 6 << 30},
		Reclaimable: nodemetric.Resources{CPUMilli: batchMilli, MemoryBytes: 8 << 30},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Annotations: map[string]string{nodemetric.AnnotationKey: m}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:             resource.MustParse("8"),
			corev1.ResourceMemory:          resource.MustParse("32Gi"),
			nodemetric.ResourceBatchCPU:    *resource.NewQuantity(batchMilli, resource.DecimalSI),
			nodemetric.ResourceBatchMemory: resource.MustParse("8Gi"),
		}},
	}
}

func pod(name, node string, requests corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
			Resources: corev1.ResourceRequirements{Requests: requests}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func batch(milli int64) corev1.ResourceList {
	return corev1.ResourceList{nodemetric.ResourceBatchCPU: *resource.NewQuantity(milli, resource.DecimalSI), nodemetric.ResourceBatchMemory: resource.MustParse("1Gi")}
}

// TestPlugin runs the plugin on informers as kube-scheduler gives them (every pod, unfiltered,
// untrimmed): the cold node passes and scores highest, the hot one is rejected for its load, the
// one whose batch capacity is taken by a running pod is rejected resolvably, and a pod bound
// while the plugin runs counts against its node.
func TestPlugin(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes := []*corev1.Node{
		node(t, "cold", 1000, 800, 4000),
		node(t, "hot", 6000, 5800, 1000),
		node(t, "taken", 2000, 1500, 3000),
	}
	client := fake.NewClientset(nodes[0], nodes[1], nodes[2], pod("running-be", "taken", batch(2500)), pod("pending", "", batch(100)))
	f := informers.NewSharedInformerFactory(client, 0)
	p, err := newLoadAware(ctx, extender.DefaultConfig(), f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer())
	if err != nil {
		t.Fatal(err)
	}
	state := framework.NewCycleState()
	be := pod("be", "", batch(1000))
	if _, st := p.PreFilter(ctx, state, be, nil); st.Code() != fwk.Error || !strings.Contains(st.Message(), "not synced") {
		t.Fatalf("PreFilter before the informers start = %v, want an error that sends the pod back", st)
	}
	f.Start(ctx.Done())
	deadline := time.Now().Add(10 * time.Second)
	for !p.decider.Ready() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, st := p.PreFilter(ctx, state, be, nil); !st.IsSuccess() {
		t.Fatalf("PreFilter = %v", st)
	}
	info := map[string]fwk.NodeInfo{}
	for _, n := range nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		info[n.Name] = ni
	}
	for name, want := range map[string]fwk.Code{"cold": fwk.Success, "hot": fwk.UnschedulableAndUnresolvable, "taken": fwk.Unschedulable} {
		if got := p.Filter(ctx, state, be, info[name]); got.Code() != want {
			t.Errorf("Filter(%s) = %v, want %v", name, got, want)
		}
	}
	cold, _ := p.Score(ctx, state, be, info["cold"])
	taken, _ := p.Score(ctx, state, be, info["taken"])
	if cold <= taken || cold > fwk.MaxScore {
		t.Errorf("scores cold %d, taken %d: want cold higher, within 0-%d", cold, taken, fwk.MaxScore)
	}

	// A pod bound to cold through the API leaves too little batch capacity there for another.
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod("bound-be", "cold", batch(3500)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for p.Filter(ctx, state, be, info["cold"]).IsSuccess() {
		if time.Now().After(deadline) {
			t.Fatal("a batch pod bound to cold did not count against its batch capacity")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := p.Filter(ctx, state, be, info["cold"]); got.Code() != fwk.Unschedulable || !strings.Contains(got.Message(), "batch-cpu") {
		t.Errorf("Filter(cold) after the bind = %v, want batch-cpu, resolvable", got)
	}
}

// TestPluginReservations: with a Reservation on cold for web-1's pods, a pod of web-1 may go to
// cold only, scoring the maximum there, and another batch pod may not take the reserved room.
func TestPluginReservations(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes := []*corev1.Node{node(t, "cold", 1000, 800, 4000), node(t, "cold2", 1000, 800, 4000)}
	client := fake.NewClientset(nodes[0], nodes[1])
	rsv := &schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1-rsv", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Minute))},
		Spec: schedv1alpha1.ReservationSpec{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: batch(3000)}}}}},
			Owners: []schedv1alpha1.ReservationOwner{{Controller: &schedv1alpha1.ReservationControllerReference{
				OwnerReference: metav1.OwnerReference{Kind: "ReplicaSet", Name: "web-1", UID: "rs-web-1"}, Namespace: "default"}}},
			TTL: &metav1.Duration{Duration: 5 * time.Minute},
		},
		Status: schedv1alpha1.ReservationStatus{Phase: schedv1alpha1.ReservationAvailable, NodeName: "cold"},
	}
	u, err := schedv1alpha1.ToUnstructured(rsv, "Reservation")
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{schedv1alpha1.ReservationsResource: "ReservationList"}, u)
	f := informers.NewSharedInformerFactory(client, 0)
	p, err := newLoadAware(ctx, extender.DefaultConfig(), f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer(), extender.WithReservations(dyn))
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	deadline := time.Now().Add(10 * time.Second)
	for !p.decider.Ready() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	info := map[string]fwk.NodeInfo{}
	for _, n := range nodes {
		ni := framework.NewNodeInfo()
		ni.SetNode(n)
		info[n.Name] = ni
	}
	owner := pod("web-1-x", "", batch(3000))
	owner.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-web-1", Controller: ptr.To(true)}}
	other := pod("other", "", batch(2000))
	for _, tt := range []struct {
		pod     *corev1.Pod
		node    string
		want    fwk.Code
		message string
	}{
		{owner, "cold", fwk.Success, ""},
		{owner, "cold2", fwk.UnschedulableAndUnresolvable, "room reserved for this pod on node cold (reservation web-1-rsv)"},
		{other, "cold", fwk.Unschedulable, "reserved for other pods (reservation web-1-rsv)"},
		{other, "cold2", fwk.Success, ""},
	} {
		state := framework.NewCycleState()
		if _, st := p.PreFilter(ctx, state, tt.pod, nil); !st.IsSuccess() {
			t.Fatalf("PreFilter(%s) = %v", tt.pod.Name, st)
		}
		got := p.Filter(ctx, state, tt.pod, info[tt.node])
		if got.Code() != tt.want || !strings.Contains(got.Message(), tt.message) {
			t.Errorf("Filter(%s on %s) = %v, want %v %q", tt.pod.Name, tt.node, got, tt.want, tt.message)
		}
		if tt.pod == owner && tt.want == fwk.Success {
			if score, _ := p.Score(ctx, state, tt.pod, info[tt.node]); score != fwk.MaxScore {
				t.Errorf("Score(%s on %s) = %d, want %d", tt.pod.Name, tt.node, score, fwk.MaxScore)
			}
		}
	}
}
