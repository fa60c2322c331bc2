// Package v1alpha1 holds the part of Koordinator's scheduling.koordinator.sh/v1alpha1 API that Tandem
// reads and writes: Reservation (capacity held on a node for pods not created yet) and PodMigrationJob
// (move one pod, reserving room first). Field names and JSON are Koordinator's, so that the objects a
// Koordinator user has keep working and `kubectl get reservations` shows Tandem's the same way; fields
// Tandem does not use are left out and kept by the API server untouched.
//
// The types are plain structs read through the dynamic client (ToUnstructured, FromUnstructured):
// Tandem's binaries carry no generated clientset for two resources, and a cluster with Koordinator
// installed serves the very same objects.
package v1alpha1

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and version of the API.
const (
	Group   = "scheduling.koordinator.sh"
	Version = "v1alpha1"
)

// The resources, both cluster-scoped as in Koordinator.
var (
	ReservationsResource     = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "reservations"}
	PodMigrationJobsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "podmigrationjobs"}
)

// Reservation holds capacity on one node for the pods its owners name.
type Reservation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ReservationSpec   `json:"spec,omitempty"`
	Status            ReservationStatus `json:"status,omitempty"`
}

// ReservationSpec is what to reserve and for whom.
type ReservationSpec struct {
	// Template's containers' requests are the capacity reserved.
	Template *corev1.PodTemplateSpec `json:"template"`
	// Owners are the pods that may use the reservation: any owner matching is enough.
	Owners []ReservationOwner `json:"owners"`
	// TTL is how long the reservation lives from its creation when Expires is not set.
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// Expires is when the reservation ends; it wins over TTL.
	Expires *metav1.Time `json:"expires,omitempty"`
	// AllocateOnce ends the reservation once an owner took it (Koordinator's default is true).
	AllocateOnce *bool `json:"allocateOnce,omitempty"`
	// Unschedulable holds a reservation back from owners.
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// ReservationOwner names pods: one pod, the pods of one controller, or pods by labels.
type ReservationOwner struct {
	Object        *corev1.ObjectReference         `json:"object,omitempty"`
	Controller    *ReservationControllerReference `json:"controller,omitempty"`
	LabelSelector *metav1.LabelSelector           `json:"labelSelector,omitempty"`
}

// ReservationControllerReference is a controller by owner reference, with its namespace.
type ReservationControllerReference struct {
	metav1.OwnerReference `json:",inline"`
	Namespace             string `json:"namespace,omitempty"`
}

// ReservationPhase is where a reservation stands.
type ReservationPhase string

// The phases Tandem uses, Koordinator's names.
const (
	ReservationPending   ReservationPhase = "Pending"
	ReservationAvailable ReservationPhase = "Available"
	ReservationSucceeded ReservationPhase = "Succeeded"
	ReservationFailed    ReservationPhase = "Failed"
)

// ReservationStatus says where the capacity is held and who took it.
type ReservationStatus struct {
	Phase         ReservationPhase         `json:"phase,omitempty"`
	Conditions    []ReservationCondition   `json:"conditions,omitempty"`
	CurrentOwners []corev1.ObjectReference `json:"currentOwners,omitempty"`
	NodeName      string                   `json:"nodeName,omitempty"`
	Allocatable   corev1.ResourceList      `json:"allocatable,omitempty"`
	Allocated     corev1.ResourceList      `json:"allocated,omitempty"`
}

// ReservationCondition is one condition, Koordinator's shape.
type ReservationCondition struct {
	Type               string      `json:"type,omitempty"`
	Status             string      `json:"status,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	LastProbeTime      metav1.Time `json:"lastProbeTime,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

// Reasons of the Ready condition, Koordinator's.
const (
	ReasonReservationAvailable = "Available"
	ReasonReservationSucceeded = "Succeeded"
	ReasonReservationExpired   = "Expired"
)

// Expired reports whether r's time is up at now (Expires, else creation + TTL); a reservation with
// neither never expires.
func (r *Reservation) Expired(now metav1.Time) bool {
	if r.Spec.Expires != nil {
		return !now.Before(r.Spec.Expires)
	}
	if r.Spec.TTL != nil && r.Spec.TTL.Duration > 0 {
		return !now.Time.Before(r.CreationTimestamp.Add(r.Spec.TTL.Duration))
	}
	return false
}

// Active reports whether r holds capacity on its node now: Available, not expired, schedulable.
func (r *Reservation) Active(now metav1.Time) bool {
	return r.Status.Phase == ReservationAvailable && r.Status.NodeName != "" && !r.Spec.Unschedulable && !r.Expired(now)
}

// Requests sums the template's container requests: what r holds on its node.
func (r *Reservation) Requests() corev1.ResourceList {
	out := corev1.ResourceList{}
	if r.Spec.Template == nil {
		return out
	}
	for _, c := range r.Spec.Template.Spec.Containers {
		for name, q := range c.Resources.Requests {
			sum := out[name]
			sum.Add(q)
			out[name] = sum
		}
	}
	return out
}

// PodMigrationJob moves one pod.
type PodMigrationJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PodMigrationJobSpec   `json:"spec,omitempty"`
	Status            PodMigrationJobStatus `json:"status,omitempty"`
}

// PodMigrationJobMode says whether room is reserved before the pod is evicted.
type PodMigrationJobMode string

// The modes.
const (
	PodMigrationJobModeReservationFirst PodMigrationJobMode = "ReservationFirst"
	PodMigrationJobModeEvictionDirectly PodMigrationJobMode = "EvictDirectly"
)

// PodMigrationJobSpec is the pod to move and how.
type PodMigrationJobSpec struct {
	Paused             bool                          `json:"paused,omitempty"`
	TTL                *metav1.Duration              `json:"ttl,omitempty"`
	Mode               PodMigrationJobMode           `json:"mode,omitempty"`
	PodRef             *corev1.ObjectReference       `json:"podRef"`
	ReservationOptions *PodMigrateReservationOptions `json:"reservationOptions,omitempty"`
	DeleteOptions      *metav1.DeleteOptions         `json:"deleteOptions,omitempty"`
}

// PodMigrateReservationOptions names the reservation the job made (or was given).
type PodMigrateReservationOptions struct {
	ReservationRef *corev1.ObjectReference `json:"reservationRef,omitempty"`
}

// PodMigrationJobPhase is where a job stands.
type PodMigrationJobPhase string

// The phases.
const (
	PodMigrationJobPending   PodMigrationJobPhase = "Pending"
	PodMigrationJobRunning   PodMigrationJobPhase = "Running"
	PodMigrationJobSucceeded PodMigrationJobPhase = "Succeeded"
	PodMigrationJobFailed    PodMigrationJobPhase = "Failed"
	PodMigrationJobAborted   PodMigrationJobPhase = "Aborted"
)

// Reasons of a job's status, Koordinator's where they exist.
const (
	PodMigrationJobReasonTimeout                   = "Timeout"
	PodMigrationJobReasonFailedCreateReservation   = "FailedCreateReservation"
	PodMigrationJobReasonReservationExpired        = "ReservationExpired"
	PodMigrationJobReasonUnschedulable             = "Unschedulable"
	PodMigrationJobReasonForbiddenMigratePod       = "ForbiddenMigratePod"
	PodMigrationJobReasonMissingPod                = "MissingPod"
	PodMigrationJobReasonEvicting                  = "Evicting"
	PodMigrationJobReasonFailedEvict               = "FailedEvict"
	PodMigrationJobReasonWaitForPodBindReservation = "WaitForPodBindReservation"
)

// PodMigrationJobStatus is the job's progress.
type PodMigrationJobStatus struct {
	Phase      PodMigrationJobPhase       `json:"phase,omitempty"`
	Status     string                     `json:"status,omitempty"`
	Reason     string                     `json:"reason,omitempty"`
	Message    string                     `json:"message,omitempty"`
	Conditions []PodMigrationJobCondition `json:"conditions,omitempty"`
	// NodeName is the node the room was reserved on.
	NodeName string `json:"nodeName,omitempty"`
	// PodRef is the replacement pod once it was placed.
	PodRef *corev1.ObjectReference `json:"podRef,omitempty"`
}

// PodMigrationJobCondition is one step of a job, Koordinator's shape.
type PodMigrationJobCondition struct {
	Type               string      `json:"type"`
	Status             string      `json:"status"`
	LastProbeTime      metav1.Time `json:"lastProbeTime,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
}

// Done reports whether the job has ended.
func (j *PodMigrationJob) Done() bool {
	switch j.Status.Phase {
	case PodMigrationJobSucceeded, PodMigrationJobFailed, PodMigrationJobAborted:
		return true
	}
	return false
}

// ToUnstructured converts one of this package's objects for the dynamic client, with its kind set.
func ToUnstructured(obj any, kind string) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(Group + "/" + Version)
	u.SetKind(kind)
	return u, nil
}

// FromUnstructured decodes a dynamic client's object into out (a *Reservation or *PodMigrationJob).
func FromUnstructured(u *unstructured.Unstructured, out any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return fmt.Errorf("decode %s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// ReservationFrom decodes a Reservation from what an informer hands over (an *unstructured.Unstructured).
func ReservationFrom(obj any) (*Reservation, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("reservation: want *unstructured.Unstructured, got %T", obj)
	}
	r := &Reservation{}
	return r, FromUnstructured(u, r)
}
