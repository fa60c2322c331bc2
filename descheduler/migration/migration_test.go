package migration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/descheduler/lowload"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func batchPod(name, uid, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: name, UID: types.UID("uid-" + uid), CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)),
			Labels:          map[string]string{"koordinator.sh/qosClass": "BE"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "work-1", UID: "rs-uid", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{nodemetric.ResourceBatchCPU: resource.MustParse("500"), nodemetric.ResourceBatchMemory: resource.MustParse("256Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

type harness struct {
	core *fake.Clientset
	dyn  *dynamicfake.FakeDynamicClient
	rec  *record.FakeRecorder
	c    *Controller
	now  time.Time
	ctx  context.Context
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	_, ctx := ktesting.NewTestContext(t)
	h := &harness{core: fake.NewClientset(objs...), rec: record.NewFakeRecorder(100), now: t0, ctx: ctx,
		dyn: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
			v1alpha1.ReservationsResource: "ReservationList", v1alpha1.PodMigrationJobsResource: "PodMigrationJobList"})}
	c, err := New(DefaultConfig(), Deps{Core: h.core, Dynamic: h.dyn, Recorder: h.rec, Now: func() time.Time { return h.now }})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	return h
}

// job returns the job as the API server holds it.
func (h *harness) job(t *testing.T, name string) *v1alpha1.PodMigrationJob {
	t.Helper()
	u, err := h.dyn.Resource(v1alpha1.PodMigrationJobsResource).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	j := &v1alpha1.PodMigrationJob{}
	if err := v1alpha1.FromUnstructured(u, j); err != nil {
		t.Fatal(err)
	}
	j.CreationTimestamp = metav1.NewTime(t0) // the fake tracker sets none
	return j
}

func (h *harness) reservation(t *testing.T, name string) *v1alpha1.Reservation {
	t.Helper()
	u, err := h.dyn.Resource(v1alpha1.ReservationsResource).Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := v1alpha1.ReservationFrom(u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run reconciles the job every second for d.
func (h *harness) run(t *testing.T, name string, d time.Duration) *v1alpha1.PodMigrationJob {
	t.Helper()
	for end := h.now.Add(d); h.now.Before(end); h.now = h.now.Add(time.Second) {
		j := h.job(t, name)
		if err := h.c.Reconcile(h.ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	return h.job(t, name)
}

func TestReserveEvictBind(t *testing.T) {
	pod := batchPod("work-1-a", "a", "hot")
	h := newHarness(t, pod)
	var evicted []string
	h.core.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		// Room must be reserved before the eviction: the reservation is Available by now.
		jobs, _ := h.dyn.Resource(v1alpha1.ReservationsResource).List(h.ctx, metav1.ListOptions{})
		if len(jobs.Items) != 1 {
			t.Errorf("eviction with %d reservations", len(jobs.Items))
		} else if r, _ := v1alpha1.ReservationFrom(&jobs.Items[0]); r.Status.Phase != v1alpha1.ReservationAvailable || r.Status.NodeName != "cold" {
			t.Errorf("eviction before the reservation was available on cold: %+v", r.Status)
		}
		evicted = append(evicted, a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName())
		return true, nil, nil
	})
	job, err := h.c.Create(h.ctx, lowload.Move{Pod: pod, From: "hot", To: "cold", Why: "test"})
	if err != nil {
		t.Fatal(err)
	}
	j := h.run(t, job.Name, 5*time.Second)
	if len(evicted) != 1 || j.Status.Reason != v1alpha1.PodMigrationJobReasonWaitForPodBindReservation {
		t.Fatalf("after 5 s: evicted %v, job %+v", evicted, j.Status)
	}
	r := h.reservation(t, j.Spec.ReservationOptions.ReservationRef.Name)
	if !r.IsOwner(batchPod("work-1-b", "b", "")) {
		t.Error("the reservation does not name the pod's controller's pods as owners")
	}
	if q := r.Requests()[nodemetric.ResourceBatchCPU]; q.Value() != 500 {
		t.Errorf("reserved %v batch-cpu, want the pod's 500", q.String())
	}
	// The ReplicaSet's replacement lands on the reserved node.
	repl := batchPod("work-1-b", "b", "cold")
	repl.CreationTimestamp = metav1.NewTime(h.now)
	if _, err := h.core.CoreV1().Pods("batch").Create(h.ctx, repl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	j = h.run(t, job.Name, 2*time.Second)
	if j.Status.Phase != v1alpha1.PodMigrationJobSucceeded || j.Status.PodRef == nil || j.Status.PodRef.Name != "work-1-b" {
		t.Fatalf("job %+v", j.Status)
	}
	if r := h.reservation(t, r.Name); r.Status.Phase != v1alpha1.ReservationSucceeded {
		t.Errorf("reservation %s after the bind", r.Status.Phase)
	}
	events := drain(h.rec)
	for _, want := range []string{"Migrating", "MigrationReserved", "MigrationEvicted", "Migrated"} {
		if !strings.Contains(events, want) {
			t.Errorf("no %s event in %s", want, events)
		}
	}
}

func TestPDBStopsTheMove(t *testing.T) {
	pod := batchPod("work-1-a", "a", "hot")
	h := newHarness(t, pod)
	h.core.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return false, nil, nil
	})
	job, err := h.c.Create(h.ctx, lowload.Move{Pod: pod, From: "hot", To: "cold"})
	if err != nil {
		t.Fatal(err)
	}
	j := h.run(t, job.Name, 5*time.Second)
	if j.Status.Phase != v1alpha1.PodMigrationJobFailed || j.Status.Reason != v1alpha1.PodMigrationJobReasonFailedEvict || !strings.Contains(j.Status.Message, "PodDisruptionBudget") {
		t.Fatalf("job %+v", j.Status)
	}
	if r := h.reservation(t, j.Spec.ReservationOptions.ReservationRef.Name); r.Status.Phase != v1alpha1.ReservationFailed {
		t.Errorf("reservation not released: %s", r.Status.Phase)
	}
	if p, err := h.core.CoreV1().Pods("batch").Get(h.ctx, pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
		t.Errorf("pod gone: %v", err)
	}
}

func TestNoRoomNoEviction(t *testing.T) {
	pod := batchPod("work-1-a", "a", "hot")
	h := newHarness(t, pod)
	h.core.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			t.Error("evicted without a reservation")
		}
		return false, nil, nil
	})
	// A job made by hand names no target; the descheduler finds no node with room.
	job := NewJob(lowload.Move{Pod: pod, From: "hot"}, time.Minute)
	delete(job.Annotations, TargetAnnotation)
	u, _ := v1alpha1.ToUnstructured(job, "PodMigrationJob")
	if _, err := h.dyn.Resource(v1alpha1.PodMigrationJobsResource).Create(h.ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	j := h.run(t, job.Name, 3*time.Second)
	if j.Status.Phase != v1alpha1.PodMigrationJobFailed || j.Status.Reason != v1alpha1.PodMigrationJobReasonUnschedulable {
		t.Fatalf("job %+v", j.Status)
	}
	if list, _ := h.dyn.Resource(v1alpha1.ReservationsResource).List(h.ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d reservations made", len(list.Items))
	}
}

func TestTimeoutReleases(t *testing.T) {
	pod := batchPod("work-1-a", "a", "hot")
	h := newHarness(t, pod)
	job, err := h.c.Create(h.ctx, lowload.Move{Pod: pod, From: "hot", To: "cold"})
	if err != nil {
		t.Fatal(err)
	}
	// Evicted, and no replacement ever comes.
	j := h.run(t, job.Name, DefaultConfig().JobTTL+time.Second)
	if j.Status.Phase != v1alpha1.PodMigrationJobFailed || j.Status.Reason != v1alpha1.PodMigrationJobReasonTimeout {
		t.Fatalf("job %+v", j.Status)
	}
	if r := h.reservation(t, j.Spec.ReservationOptions.ReservationRef.Name); r.Status.Phase != v1alpha1.ReservationFailed {
		t.Errorf("reservation %s after the timeout", r.Status.Phase)
	}
}

func drain(r *record.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}
