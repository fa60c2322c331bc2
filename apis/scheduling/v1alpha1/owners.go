package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Matches reports whether pod is one of the pods o names: the pod itself (by UID when set, else by
// namespace and name), a pod whose controller is o's controller (by UID when set, else by kind, name
// and namespace), or a pod whose labels o's selector selects. A selector that does not parse selects
// nothing.
func (o ReservationOwner) Matches(pod *corev1.Pod) bool {
	switch {
	case o.Object != nil:
		if o.Object.UID != "" {
			return o.Object.UID == pod.UID
		}
		return o.Object.Namespace == pod.Namespace && o.Object.Name == pod.Name
	case o.Controller != nil:
		ref := metav1.GetControllerOf(pod)
		if ref == nil {
			return false
		}
		if o.Controller.UID != "" {
			return o.Controller.UID == ref.UID
		}
		return o.Controller.Namespace == pod.Namespace && o.Controller.Kind == ref.Kind && o.Controller.Name == ref.Name
	case o.LabelSelector != nil:
		sel, err := metav1.LabelSelectorAsSelector(o.LabelSelector)
		return err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels))
	}
	return false
}

// IsOwner reports whether any of r's owners matches pod.
func (r *Reservation) IsOwner(pod *corev1.Pod) bool {
	for _, o := range r.Spec.Owners {
		if o.Matches(pod) {
			return true
		}
	}
	return false
}
