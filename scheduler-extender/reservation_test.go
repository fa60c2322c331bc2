package extender

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	schedv1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// testReservation is a Reservation as tandem-descheduler makes it: for the pods of one
// ReplicaSet, its room set by the template's batch requests, placed by setting its status.
type testReservation struct {
	name, node  string
	controller  string // the owner ReplicaSet, UID "uid-" + controller
	cpu, memory string
	phase       schedv1alpha1.ReservationPhase // "": Available
	age, ttl    time.Duration                  // 0: a minute old, a TTL of five
	currentPod  string                         // the UID of a pod Koordinator recorded as its owner
}

func (r testReservation) build(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	phase, age, ttl := r.phase, r.age, r.ttl
	if phase == "" {
		phase = schedv1alpha1.ReservationAvailable
	}
	if age == 0 {
		age = time.Minute
	}
	if ttl == 0 {
		ttl = 5 * time.Minute
	}
	res := &schedv1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{Name: r.name, CreationTimestamp: metav1.NewTime(testNow.Add(-age))},
		Spec: schedv1alpha1.ReservationSpec{
			Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{nodemetric.ResourceBatchCPU: resource.MustParse(r.cpu), nodemetric.ResourceBatchMemory: resource.MustParse(r.memory)},
			}}}}},
			Owners: []schedv1alpha1.ReservationOwner{{Controller: &schedv1alpha1.ReservationControllerReference{
				OwnerReference: metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: r.controller, UID: types.UID("uid-" + r.controller)},
				Namespace:      "default",
			}}},
			TTL:          &metav1.Duration{Duration: ttl},
			AllocateOnce: ptr.To(true),
		},
		Status: schedv1alpha1.ReservationStatus{Phase: phase, NodeName: r.node},
	}
	if r.currentPod != "" {
		res.Status.CurrentOwners = []corev1.ObjectReference{{UID: types.UID("uid-" + r.currentPod)}}
	}
	u, err := schedv1alpha1.ToUnstructured(res, "Reservation")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// reservationClient is a fake dynamic client serving reservations.
func reservationClient(t *testing.T, rs ...testReservation) *dynamicfake.FakeDynamicClient {
	t.Helper()
	objs := make([]runtime.Object, 0, len(rs))
	for _, r := range rs {
		objs = append(objs, r.build(t))
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{schedv1alpha1.ReservationsResource: "ReservationList"}, objs...)
}

// reservedCluster: cold and cold2 have 3000m and 8Gi of free batch room each, tight 1000m and 8Gi.
func reservedCluster() []testNode {
	return []testNode{
		{name: "cold", metric: metricAt(30*time.Second, 2000, 8*gi, 1500, 6*gi, 3000, 8*gi), batchCPU: 3000, batchMemory: 8 * gi},
		{name: "cold2", metric: metricAt(30*time.Second, 2000, 8*gi, 1500, 6*gi, 3000, 8*gi), batchCPU: 3000, batchMemory: 8 * gi},
		{name: "tight", metric: metricAt(30*time.Second, 2000, 8*gi, 1500, 6*gi, 1000, 8*gi), batchCPU: 1000, batchMemory: 8 * gi},
	}
}

func ownedPod(name, controller, cpu string) testPod {
	p := batchPod(name, "", cpu, "1Gi")
	p.controller = controller
	p.created = testNow
	return p
}

// filterResult is filter's answer for one node, over HTTP.
type filterResult struct {
	passed     bool
	message    string
	resolvable bool
}

func (s *extenderServer) filterOne(t *testing.T, pod *corev1.Pod, node string) filterResult {
	t.Helper()
	code, body := s.post(t, FilterPath, schedulerArgs(t, pod, []string{node}, nil))
	if code != http.StatusOK {
		t.Fatalf("filter: status %d: %s", code, body)
	}
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if m, ok := res.FailedNodes[node]; ok {
		return filterResult{message: m, resolvable: true}
	}
	if m, ok := res.FailedAndUnresolvableNodes[node]; ok {
		return filterResult{message: m}
	}
	return filterResult{passed: res.NodeNames != nil && len(*res.NodeNames) == 1}
}

func (s *extenderServer) scoreOne(t *testing.T, pod *corev1.Pod, node string) int64 {
	t.Helper()
	code, body := s.post(t, PrioritizePath, schedulerArgs(t, pod, []string{node}, nil))
	if code != http.StatusOK {
		t.Fatalf("prioritize: status %d: %s", code, body)
	}
	var list extenderv1.HostPriorityList
	if err := json.Unmarshal(body, &list); err != nil || len(list) != 1 {
		t.Fatalf("prioritize answered %s (%v)", body, err)
	}
	return list[0].Score
}

// reservationCheck is one pod on one node and what filter and prioritize must say.
type reservationCheck struct {
	pod    testPod
	node   string
	reason Reason // "": passes
	// message is a part of filter's message, when rejected.
	message string
	// score, when not 0, is prioritize's score of the node.
	score int64
}

// TestReservations checks filter and prioritize with Reservations present, over HTTP and through
// Decider: reserved room is kept from other pods, an owner goes to its reserved node only, and a
// reservation that expired, ended or was taken holds nothing.
func TestReservations(t *testing.T) {
	t.Parallel()
	type check = reservationCheck
	rsv := testReservation{name: "web-1-rsv", node: "cold", controller: "web-1", cpu: "2000", memory: "2Gi"}
	withRsv := func(f func(*testReservation)) testReservation {
		r := rsv
		f(&r)
		return r
	}
	// A replacement pod of web-1, bound to cold after the reservation was made.
	bound := ownedPod("web-1-new", "web-1", "2000")
	bound.node = "cold"
	bound.requests[nodemetric.ResourceBatchMemory] = "2Gi"
	// A pod of web-1 that ran on cold before the reservation.
	sibling := ownedPod("web-1-old", "web-1", "500")
	sibling.node, sibling.created = "cold", testNow.Add(-time.Hour)

	tests := []struct {
		name         string
		reservations []testReservation
		pods         []testPod
		gauge        float64
		checks       []check
	}{{
		name:         "available",
		reservations: []testReservation{rsv},
		gauge:        1,
		checks: []check{
			{pod: batchPod("other", "", "1500", "1Gi"), node: "cold", reason: ReasonBatchReserved, message: "(reservation web-1-rsv)"},
			{pod: batchPod("other", "", "1000", "1Gi"), node: "cold"},
			{pod: batchPod("other", "", "3000", "1Gi"), node: "cold2"},
			{pod: batchPod("other", "", "3500", "1Gi"), node: "cold", reason: ReasonBatchCPU},
			{pod: ownedPod("web-1-x", "web-1", "2000"), node: "cold", score: extenderv1.MaxExtenderPriority},
			{pod: ownedPod("web-1-x", "web-1", "3000"), node: "cold"},
			{pod: ownedPod("web-1-x", "web-1", "2000"), node: "cold2", reason: ReasonReservedElsewhere,
				message: "tandem: room reserved for this pod on node cold (reservation web-1-rsv)"},
			{pod: ownedPod("web-2-x", "web-2", "2000"), node: "cold2"},
			// Not a batch pod: reservations do not concern it.
			{pod: lsPod("ls", "", "1", "1Gi"), node: "cold2"},
		},
	}, {
		name:         "the owner fits in its room even where the node's capacity shrank",
		reservations: []testReservation{withRsv(func(r *testReservation) { r.node = "tight" })},
		gauge:        1,
		checks: []check{
			{pod: ownedPod("web-1-x", "web-1", "2000"), node: "tight", score: extenderv1.MaxExtenderPriority},
			{pod: ownedPod("web-1-x", "web-1", "2500"), node: "tight", reason: ReasonBatchCPU},
			{pod: batchPod("other", "", "500", "1Gi"), node: "tight", reason: ReasonBatchReserved},
		},
	}, {
		name: "two reservations on one node",
		reservations: []testReservation{rsv, withRsv(func(r *testReservation) {
			r.name, r.controller, r.cpu = "web-2-rsv", "web-2", "500"
		})},
		gauge: 2,
		checks: []check{
			{pod: batchPod("other", "", "1000", "1Gi"), node: "cold", reason: ReasonBatchReserved, message: "(reservations web-1-rsv, web-2-rsv)"},
			{pod: batchPod("other", "", "500", "1Gi"), node: "cold"},
			{pod: ownedPod("web-1-x", "web-1", "2500"), node: "cold"},
			{pod: ownedPod("web-1-x", "web-1", "2600"), node: "cold", reason: ReasonBatchReserved, message: "(reservation web-2-rsv)"},
		},
	}, {
		name:         "expired",
		reservations: []testReservation{withRsv(func(r *testReservation) { r.age = 10 * time.Minute })},
		checks: []check{
			{pod: batchPod("other", "", "3000", "1Gi"), node: "cold"},
			{pod: ownedPod("web-1-x", "web-1", "2000"), node: "cold2"},
		},
	}, {
		name:         "succeeded",
		reservations: []testReservation{withRsv(func(r *testReservation) { r.phase = schedv1alpha1.ReservationSucceeded })},
		checks: []check{
			{pod: batchPod("other", "", "3000", "1Gi"), node: "cold"},
			{pod: ownedPod("web-1-x", "web-1", "2000"), node: "cold2"},
		},
	}, {
		name:         "pending: not placed yet",
		reservations: []testReservation{withRsv(func(r *testReservation) { r.phase, r.node = schedv1alpha1.ReservationPending, "" })},
		checks: []check{
			{pod: ownedPod("web-1-x", "web-1", "2000"), node: "cold2"},
		},
	}, {
		// The bound owner's own 2000m count, the reservation's no longer: not twice.
		name:         "taken by an owner bound there",
		reservations: []testReservation{rsv},
		pods:         []testPod{bound},
		checks: []check{
			{pod: batchPod("other", "", "1000", "1Gi"), node: "cold"},
			{pod: batchPod("other", "", "1500", "1Gi"), node: "cold", reason: ReasonBatchCPU},
			{pod: ownedPod("web-1-y", "web-1", "500"), node: "cold2"},
		},
	}, {
		name:         "taken by the pod Koordinator recorded",
		reservations: []testReservation{withRsv(func(r *testReservation) { r.currentPod = "web-1-old" })},
		pods:         []testPod{sibling},
		checks: []check{
			{pod: batchPod("other", "", "2500", "1Gi"), node: "cold"},
		},
	}, {
		name:         "not taken by a pod of the owner that ran there before",
		reservations: []testReservation{rsv},
		pods:         []testPod{sibling},
		gauge:        1,
		checks: []check{
			{pod: batchPod("other", "", "1000", "1Gi"), node: "cold", reason: ReasonBatchReserved},
			{pod: batchPod("other", "", "500", "1Gi"), node: "cold"},
			{pod: ownedPod("web-1-x", "web-1", "2000"), node: "cold2", reason: ReasonReservedElsewhere},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startExtender(t, DefaultConfig(), reservedCluster(), tt.pods, WithReservations(reservationClient(t, tt.reservations...)))
			if !s.nodes.ReservationsWatched() {
				t.Fatal("reservations are served but not watched")
			}
			d := NewDecider(DefaultConfig(), s.nodes)
			d.now = func() time.Time { return testNow }
			if got := gaugeOf(t, s); got != tt.gauge {
				t.Errorf("tandem_extender_reservations = %v, want %v", got, tt.gauge)
			}
			for _, c := range tt.checks {
				pod := c.pod.build()
				got := s.filterOne(t, pod, c.node)
				rej := d.Filter(d.DemandOf(pod), c.node)
				what := c.pod.name + " on " + c.node
				switch {
				case c.reason == "" && !got.passed:
					t.Errorf("%s: filter rejects it: %q", what, got.message)
				case c.reason != "" && got.passed:
					t.Errorf("%s: filter passes it, want %s", what, c.reason)
				case c.reason != "" && !strings.Contains(got.message, c.message):
					t.Errorf("%s: message %q, want it to hold %q", what, got.message, c.message)
				case c.reason != "" && got.resolvable != c.reason.resolvable():
					t.Errorf("%s: resolvable %v, want %v for %s", what, got.resolvable, c.reason.resolvable(), c.reason)
				}
				switch {
				case c.reason == "" && rej != nil:
					t.Errorf("%s: Decider rejects it: %+v", what, rej)
				case c.reason != "" && (rej == nil || rej.Reason != c.reason || rej.Message != got.message):
					t.Errorf("%s: Decider says %+v, want %s with filter's message %q", what, rej, c.reason, got.message)
				}
				if c.score != 0 {
					if got := s.scoreOne(t, pod, c.node); got != c.score {
						t.Errorf("%s: prioritize scores %d, want %d", what, got, c.score)
					}
					if got := d.Score(d.DemandOf(pod), c.node); got != c.score {
						t.Errorf("%s: Decider scores %d, want %d", what, got, c.score)
					}
				}
			}
			if n := testutil.ToFloat64(s.h.metrics.rejections[ReasonReservedElsewhere]) + testutil.ToFloat64(s.h.metrics.rejections[ReasonBatchReserved]); n == 0 && wantsReservationRejection(tt.checks) {
				t.Error("filter_rejections_total counts no rejection for reservations")
			}
		})
	}
}

func wantsReservationRejection(checks []reservationCheck) bool {
	for _, c := range checks {
		if c.reason == ReasonBatchReserved || c.reason == ReasonReservedElsewhere {
			return true
		}
	}
	return false
}

// gaugeOf is the tandem_extender_reservations gauge of s.
func gaugeOf(t *testing.T, s *extenderServer) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "tandem_extender_reservations" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no tandem_extender_reservations gauge")
	return 0
}

// TestReservationsNotServed: where the API server does not serve reservations (no CRD) or the
// extender may not read them, the extender is ready and decides as without reservations.
func TestReservationsNotServed(t *testing.T) {
	t.Parallel()
	gr := schedv1alpha1.ReservationsResource.GroupResource()
	tests := []struct {
		name string
		err  error
	}{
		{"no CRD", apierrors.NewNotFound(gr, "")},
		{"forbidden", apierrors.NewForbidden(gr, "", nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			client := reservationClient(t, testReservation{name: "r", node: "cold", controller: "web-1", cpu: "3000", memory: "1Gi"})
			client.PrependReactor("list", "reservations", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.err
			})
			s := startExtender(t, DefaultConfig(), reservedCluster(), nil, WithReservations(client))
			if s.nodes.ReservationsWatched() {
				t.Error("reservations watched although listing them fails")
			}
			if code := s.get(t, ReadyzPath); code != http.StatusOK {
				t.Errorf("GET %s = %d, want 200", ReadyzPath, code)
			}
			for _, p := range []testPod{batchPod("other", "", "3000", "1Gi"), ownedPod("web-1-x", "web-1", "3000")} {
				if got := s.filterOne(t, p.build(), "cold"); !got.passed {
					t.Errorf("%s: rejected: %q", p.name, got.message)
				}
			}
			if got := gaugeOf(t, s); got != 0 {
				t.Errorf("tandem_extender_reservations = %v, want 0", got)
			}
		})
	}
}
