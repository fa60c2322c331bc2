package descheduler

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/descheduler/config"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func testNode(name string, usedMilli int64, age time.Duration) *corev1.Node {
	m, _ := nodemetric.Marshal(&nodemetric.NodeMetric{UpdateTime: now.Add(-age), ReportIntervalSeconds: 60,
		NodeUsage: nodemetric.Resources{CPUMilli: usedMilli, MemoryBytes: 1 << 30}})
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{nodemetric.AnnotationKey: m}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
				nodemetric.ResourceBatchCPU: resource.MustParse("2000"), nodemetric.ResourceBatchMemory: resource.MustParse("8Gi")}}}
}

func testPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: name, UID: types.UID("uid-" + name),
		Labels:          map[string]string{"koordinator.sh/qosClass": "BE"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{nodemetric.ResourceBatchCPU: resource.MustParse("500")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func newTest(t *testing.T, cfg config.Config, objs ...runtime.Object) (*Descheduler, *dynamicfake.FakeDynamicClient, *record.FakeRecorder, context.Context) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.ReservationsResource: "ReservationList", v1alpha1.PodMigrationJobsResource: "PodMigrationJobList"})
	rec := record.NewFakeRecorder(100)
	reg := prometheus.NewRegistry()
	d, err := New(cfg, Deps{Core: fake.NewClientset(objs...), Dynamic: dyn, Recorder: rec, Registerer: reg, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	d.factory.Start(ctx.Done())
	d.dynFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), d.nodes.HasSynced, d.pods.HasSynced, d.jobs.HasSynced, d.reservations.HasSynced) {
		t.Fatal("informers did not sync")
	}
	return d, dyn, rec, ctx
}

func testConfig() config.Config {
	c := config.Default()
	c.LowLoad.ConsecutiveAbnormalities = 1
	return c
}

func jobsMade(t *testing.T, ctx context.Context, dyn *dynamicfake.FakeDynamicClient) int {
	list, err := dyn.Resource(v1alpha1.PodMigrationJobsResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

func TestDecide(t *testing.T) {
	hot, cold := testNode("hot", 3600, time.Minute), testNode("cold", 400, time.Minute)
	pods := []runtime.Object{hot, cold, testPod("a", "hot"), testPod("b", "hot"), testPod("c", "hot")}
	cases := []struct {
		name   string
		cfg    func(*config.Config)
		nodes  []runtime.Object
		jobs   int
		result string
		event  string
	}{
		{name: "moves within maxMigratingPerNode", jobs: 1, result: "move", event: "Migrating"},
		{name: "per node limit 2", cfg: func(c *config.Config) { c.MaxMigratingPerNode = 2 }, jobs: 2, result: "move"},
		{name: "global limit", cfg: func(c *config.Config) { c.MaxMigratingPerNode, c.MaxMigratingGlobally = 3, 1 }, jobs: 1, result: "limited"},
		{name: "dry run makes nothing and says so", cfg: func(c *config.Config) { c.DryRun = true }, jobs: 0, result: "dryRun", event: "WouldMigrate"},
		{name: "paused", cfg: func(c *config.Config) { c.Paused = true }, jobs: 0},
		{name: "stale agents: nothing", nodes: []runtime.Object{testNode("hot", 3600, time.Hour), testNode("cold", 400, time.Hour)}, jobs: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			objs := pods
			if tc.nodes != nil {
				objs = append(append([]runtime.Object{}, tc.nodes...), pods[2:]...)
			}
			d, dyn, rec, ctx := newTest(t, cfg, objs...)
			d.Decide(ctx)
			if got := jobsMade(t, ctx, dyn); got != tc.jobs {
				t.Errorf("%d jobs made, want %d", got, tc.jobs)
			}
			if tc.result != "" {
				if v := testutil.ToFloat64(d.decisions.WithLabelValues(tc.result)); v < 1 {
					t.Errorf("decisions_total{result=%q} = %v", tc.result, v)
				}
			}
			var events []string
			for len(rec.Events) > 0 {
				events = append(events, <-rec.Events)
			}
			if tc.event != "" && !strings.Contains(strings.Join(events, "\n"), tc.event) {
				t.Errorf("no %s event: %v", tc.event, events)
			}
			if tc.nodes != nil {
				if v := testutil.ToFloat64(d.classes.WithLabelValues("stale")); v != 2 {
					t.Errorf("stale nodes gauge %v", v)
				}
			}
		})
	}
}

// TestFailedJobHoldsNoSlot: a pod whose job failed is not chosen again, and does not take the node's
// one migration slot from the next pod.
func TestFailedJobHoldsNoSlot(t *testing.T) {
	hot, cold := testNode("hot", 3600, time.Minute), testNode("cold", 400, time.Minute)
	guarded, free := testPod("guarded", "hot"), testPod("free", "hot")
	guarded.CreationTimestamp = metav1.NewTime(now) // the youngest: chosen first
	d, dyn, _, ctx := newTest(t, testConfig(), hot, cold, guarded, free)
	failed := &v1alpha1.PodMigrationJob{ObjectMeta: metav1.ObjectMeta{Name: "tandem-guarded-uid-guar"},
		Spec:   v1alpha1.PodMigrationJobSpec{PodRef: &corev1.ObjectReference{Namespace: "batch", Name: "guarded", UID: guarded.UID}},
		Status: v1alpha1.PodMigrationJobStatus{Phase: v1alpha1.PodMigrationJobFailed, Reason: v1alpha1.PodMigrationJobReasonFailedEvict}}
	u, _ := v1alpha1.ToUnstructured(failed, "PodMigrationJob")
	if _, err := dyn.Resource(v1alpha1.PodMigrationJobsResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), func() bool { return len(d.jobList()) == 1 }) {
		t.Fatal("the informer never saw the job")
	}
	d.Decide(ctx)
	list, _ := dyn.Resource(v1alpha1.PodMigrationJobsResource).List(ctx, metav1.ListOptions{})
	var pods []string
	for i := range list.Items {
		var j v1alpha1.PodMigrationJob
		if err := v1alpha1.FromUnstructured(&list.Items[i], &j); err == nil {
			pods = append(pods, j.Spec.PodRef.Name)
		}
	}
	if len(pods) != 2 || !slices.Contains(pods, "free") {
		t.Errorf("jobs for %v, want the failed one and one for free", pods)
	}
}
