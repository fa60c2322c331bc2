package lowload

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/metrics/nodemetric"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// node is a 4-CPU, 16 GiB node whose agent published cpu usage (milli-cores) and batch-cpu.
func node(name string, usedMilli, batchMilli int64, age time.Duration) *corev1.Node {
	m, err := nodemetric.Marshal(&nodemetric.NodeMetric{UpdateTime: now.Add(-age), ReportIntervalSeconds: 60,
		NodeUsage: nodemetric.Resources{CPUMilli: usedMilli, MemoryBytes: 4 << 30}})
	if err != nil {
		panic(err)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}, Annotations: map[string]string{nodemetric.AnnotationKey: m}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
				nodemetric.ResourceBatchCPU: *resource.NewQuantity(batchMilli, resource.DecimalSI), nodemetric.ResourceBatchMemory: resource.MustParse("8Gi")},
		},
	}
}

// pod is a running pod of class qos with a ReplicaSet, started age ago, requesting batch-cpu milli.
func pod(name, qos string, prio int32, milli int64, age time.Duration) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: name, Labels: map[string]string{"koordinator.sh/qosClass": qos},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Priority: ptr.To(prio), Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{nodemetric.ResourceBatchCPU: *resource.NewQuantity(milli, resource.DecimalSI), nodemetric.ResourceBatchMemory: resource.MustParse("256Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: ptr.To(metav1.NewTime(now.Add(-age)))},
	}
	return p
}

func settings() Settings {
	return Settings{HighThresholds: Thresholds{corev1.ResourceCPU: 70}, LowThresholds: Thresholds{corev1.ResourceCPU: 40},
		ConsecutiveAbnormalities: 2, MetricExpiration: 3 * time.Minute, NodeFit: true}
}

func TestClassify(t *testing.T) {
	d := NewDetector()
	nodes := []*NodeInfo{
		{Node: node("hot", 3200, 0, time.Minute)},
		{Node: node("cold", 800, 2000, time.Minute)},
		{Node: node("middle", 2000, 1000, time.Minute)},
		{Node: node("stale", 3900, 1000, 10*time.Minute)},
	}
	first := d.Classify(now, settings(), nodes)
	second := d.Classify(now, settings(), nodes)
	want := map[string][2]Class{"hot": {Abnormal, Hot}, "cold": {Cold, Cold}, "middle": {Normal, Normal}, "stale": {Stale, Stale}}
	for i, st := range second {
		w := want[st.Name]
		if first[i].Class != w[0] || st.Class != w[1] {
			t.Errorf("%s: %s then %s, want %s then %s (%s)", st.Name, first[i].Class, st.Class, w[0], w[1], st.Why)
		}
	}
	if !strings.Contains(second[0].Why+second[1].Why+second[2].Why+second[3].Why, "nodeMetricExpirationSeconds") {
		t.Error("a stale node does not say why")
	}
	// A normal round breaks the streak.
	nodes[0].Node = node("hot", 1000, 0, time.Minute)
	d.Classify(now, settings(), nodes)
	nodes[0].Node = node("hot", 3200, 0, time.Minute)
	if st := d.Classify(now, settings(), nodes); st[1].Class != Abnormal {
		t.Errorf("after a normal round: %s, want abnormal", st[1].Class)
	}
}

func TestPlan(t *testing.T) {
	hotNode := node("hot", 3600, 0, time.Minute) // 90%: 800m over 70%
	young := pod("young", "BE", 10, 500, time.Minute)
	old := pod("old", "BE", 10, 500, time.Hour)
	low := pod("low", "BE", 1, 300, time.Hour)
	ls := pod("ls", "LS", 0, 0, time.Hour)
	ls.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	bare := pod("bare", "BE", 0, 500, time.Hour)
	bare.OwnerReferences = nil
	ds := pod("ds", "BE", 0, 500, time.Hour)
	ds.OwnerReferences[0].Kind = "DaemonSet"
	cases := []struct {
		name     string
		cold     []*corev1.Node
		s        func(*Settings)
		limit    func(*corev1.Pod, string) bool
		want     []string // pod→node
		unplaced []string
	}{
		{name: "lowest priority, then youngest, until under the high threshold; never LS, bare or DaemonSet pods",
			cold: []*corev1.Node{node("cold", 400, 4000, time.Minute)}, want: []string{"low→cold", "young→cold"}},
		{name: "the coldest node with room receives", cold: []*corev1.Node{node("cool", 1200, 4000, time.Minute), node("cold", 400, 4000, time.Minute)},
			want: []string{"low→cold", "young→cold"}},
		{name: "room runs out: the rest are not placed (and so not evicted)", cold: []*corev1.Node{node("cold", 400, 600, time.Minute)},
			want: []string{"low→cold"}, unplaced: []string{"young", "old"}},
		{name: "no cold node: nothing", cold: []*corev1.Node{node("warm", 2400, 4000, time.Minute)}},
		{name: "a stale cold node is no target", cold: []*corev1.Node{node("cold", 400, 4000, 10*time.Minute)}},
		{name: "rate limit says no to one", cold: []*corev1.Node{node("cold", 400, 4000, time.Minute)},
			limit: func(p *corev1.Pod, _ string) bool { return p.Name != "low" }, want: []string{"young→cold", "old→cold"}},
		{name: "namespace excluded", cold: []*corev1.Node{node("cold", 400, 4000, time.Minute)}, s: func(s *Settings) { s.Exclude = []string{"batch"} }},
		{name: "pod selector", cold: []*corev1.Node{node("cold", 400, 4000, time.Minute)},
			s: func(s *Settings) { s.PodSelectors = []labels.Selector{labels.SelectorFromSet(labels.Set{"app": "x"})} }},
		{name: "node fit: a taint the pods do not tolerate", cold: func() []*corev1.Node {
			n := node("cold", 400, 4000, time.Minute)
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
			return []*corev1.Node{n}
		}(), unplaced: []string{"low", "young", "old"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := settings()
			s.ConsecutiveAbnormalities = 1
			if tc.s != nil {
				tc.s(&s)
			}
			infos := []*NodeInfo{{Node: hotNode, Pods: []*corev1.Pod{young, old, low, ls, bare, ds}}}
			for _, c := range tc.cold {
				infos = append(infos, &NodeInfo{Node: c})
			}
			moves, unplaced := Plan(s, NewDetector().Classify(now, s, infos), tc.limit)
			var got, gotU []string
			for _, m := range moves {
				got = append(got, m.Pod.Name+"→"+m.To)
				if m.From != "hot" {
					t.Errorf("move from %s", m.From)
				}
			}
			for _, u := range unplaced {
				gotU = append(gotU, u.Pod.Name)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(gotU, tc.unplaced) {
				t.Errorf("moves %v unplaced %v, want %v and %v", got, gotU, tc.want, tc.unplaced)
			}
		})
	}
}
