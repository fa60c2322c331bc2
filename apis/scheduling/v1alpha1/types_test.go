package v1alpha1

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestOwnerMatches(t *testing.T) {
	rs := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-uid", Controller: ptr.To(true)}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: "web-1-x", UID: "pod-uid", Labels: map[string]string{"app": "web"},
		OwnerReferences: []metav1.OwnerReference{rs}}}
	cases := []struct {
		name  string
		owner ReservationOwner
		want  bool
	}{
		{"object by uid", ReservationOwner{Object: &corev1.ObjectReference{UID: "pod-uid"}}, true},
		{"object by name", ReservationOwner{Object: &corev1.ObjectReference{Namespace: "batch", Name: "web-1-x"}}, true},
		{"another object", ReservationOwner{Object: &corev1.ObjectReference{Namespace: "batch", Name: "web-1-y"}}, false},
		{"controller by uid", ReservationOwner{Controller: &ReservationControllerReference{OwnerReference: metav1.OwnerReference{UID: "rs-uid"}}}, true},
		{"controller by name", ReservationOwner{Controller: &ReservationControllerReference{OwnerReference: metav1.OwnerReference{Kind: "ReplicaSet", Name: "web-1"}, Namespace: "batch"}}, true},
		{"controller in another namespace", ReservationOwner{Controller: &ReservationControllerReference{OwnerReference: metav1.OwnerReference{Kind: "ReplicaSet", Name: "web-1"}, Namespace: "default"}}, false},
		{"labels", ReservationOwner{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}, true},
		{"other labels", ReservationOwner{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}, false},
		{"empty selector selects nothing", ReservationOwner{LabelSelector: &metav1.LabelSelector{}}, false},
		{"no owner", ReservationOwner{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.owner.Matches(pod); got != tc.want {
				t.Errorf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReservationLifetime(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	r := &Reservation{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created},
		Spec:   ReservationSpec{TTL: &metav1.Duration{Duration: 5 * time.Minute}},
		Status: ReservationStatus{Phase: ReservationAvailable, NodeName: "n"}}
	if !r.Active(metav1.NewTime(created.Add(4 * time.Minute))) {
		t.Error("not active within its TTL")
	}
	if r.Active(metav1.NewTime(created.Add(5 * time.Minute))) {
		t.Error("active after its TTL")
	}
	r.Spec.Expires = ptr.To(metav1.NewTime(created.Add(10 * time.Minute)))
	if !r.Active(metav1.NewTime(created.Add(6 * time.Minute))) {
		t.Error("Expires does not win over TTL")
	}
	r.Status.Phase = ReservationSucceeded
	if r.Active(metav1.NewTime(created.Add(time.Minute))) {
		t.Error("a taken reservation holds capacity")
	}
}

func TestRoundTrip(t *testing.T) {
	q := resource.MustParse("500")
	r := &Reservation{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: ReservationSpec{Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
		{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"kubernetes.io/batch-cpu": q}}},
		{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"kubernetes.io/batch-cpu": q}}},
	}}}}}
	u, err := ToUnstructured(r, "Reservation")
	if err != nil {
		t.Fatal(err)
	}
	if u.GetAPIVersion() != "scheduling.koordinator.sh/v1alpha1" || u.GetKind() != "Reservation" {
		t.Errorf("gvk %s %s", u.GetAPIVersion(), u.GetKind())
	}
	back, err := ReservationFrom(u)
	if err != nil {
		t.Fatal(err)
	}
	got := back.Requests()["kubernetes.io/batch-cpu"]
	if got.Value() != 1000 {
		t.Errorf("requests %v, want 1000", got.String())
	}
}
