package descheduler

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tandemkit/tandem/metrics/nodemetric"
)

const (
	batchCPU    = nodemetric.ResourceBatchCPU
	batchMemory = nodemetric.ResourceBatchMemory
)

func metaNow(t time.Time) metav1.Time { return metav1.NewTime(t) }

// nodeRef is a Node for events, as kubelet refers to it.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: name, UID: types.UID(name)}
}
