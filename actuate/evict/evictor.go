package evict

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// EventReason is the reason of the Kubernetes Event recorded for each eviction.
const EventReason = "Evicted"

// API is what APIEvictor needs of the API server; *kubeclient.Client has it.
type API interface {
	EvictPod(ctx context.Context, eviction *policyv1.Eviction) error
	CreateEvent(ctx context.Context, event *corev1.Event) (*corev1.Event, error)
}

// APIEvictor evicts through the Eviction API (policy/v1), so PodDisruptionBudgets are honoured and
// controllers replace the pod elsewhere, and records a Warning Event on the pod naming the reason.
type APIEvictor struct {
	client   API
	nodeName string
	// now stamps the events; a field so tests can fix it.
	now func() time.Time
}

var _ Evictor = (*APIEvictor)(nil)

// NewAPIEvictor evicts through client; nodeName goes into the events' source.
func NewAPIEvictor(client API, nodeName string) *APIEvictor {
	return &APIEvictor{client: client, nodeName: nodeName, now: time.Now}
}

// Evict asks the apiserver to evict the pod. A 429 (a PodDisruptionBudget allows no disruption now)
// wraps ErrRefused; a pod that is gone already counts as evicted.
func (e *APIEvictor) Evict(ctx context.Context, pod Pod, reason Reason, message string) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name}}
	if pod.UID != "" {
		// Evict only the pod the snapshot saw, not a namesake created since.
		uid := types.UID(pod.UID)
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	}
	err := e.client.EvictPod(ctx, ev)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		return fmt.Errorf("pod %s/%s: the apiserver refused the eviction (a PodDisruptionBudget allows none now): %w: %w", pod.Namespace, pod.Name, ErrRefused, err)
	case err != nil:
		return fmt.Errorf("evict pod %s/%s through the Eviction API (check the node agent's RBAC for pods/eviction): %w", pod.Namespace, pod.Name, err)
	}
	e.event(ctx, pod, reason, message)
	return nil
}

// event records the eviction on the pod. A failure is logged only: the pod is evicted either way.
func (e *APIEvictor) event(ctx context.Context, pod Pod, reason Reason, message string) {
	now := metav1.NewTime(e.now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID),
		},
		Reason:              EventReason,
		Message:             fmt.Sprintf("Evicted by tandem-proxy (%s): %s", reason, message),
		Type:                corev1.EventTypeWarning,
		Source:              corev1.EventSource{Component: "tandem-proxy", Host: e.nodeName},
		ReportingController: "tandem.io/tandem-proxy",
		ReportingInstance:   "tandem-proxy-" + e.nodeName,
		Action:              "Evict",
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if _, err := e.client.CreateEvent(ctx, ev); err != nil {
		klog.FromContext(ctx).Error(err, "Eviction event not recorded", "pod", klog.KRef(pod.Namespace, pod.Name))
	}
}

// SandboxStopper is the part of a CRI runtime client that CRIEvictor needs; k8s.io/cri-client's
// RuntimeService has it. Point it at the proxy's own socket, so the proxy's hooks and store see the
// stop as they see kubelet's.
type SandboxStopper interface {
	StopPodSandbox(ctx context.Context, podSandboxID string) error
}

// CRIEvictor stops the pod's sandbox through the runtime, for a node without an apiserver. Kubelet,
// if any, sees the pod stopped; nothing reschedules it.
type CRIEvictor struct {
	runtime SandboxStopper
}

var _ Evictor = (*CRIEvictor)(nil)

// NewCRIEvictor stops sandboxes through runtime.
func NewCRIEvictor(runtime SandboxStopper) *CRIEvictor { return &CRIEvictor{runtime: runtime} }

// Evict stops the pod's sandbox, which stops all of its containers.
func (e *CRIEvictor) Evict(ctx context.Context, pod Pod, _ Reason, _ string) error {
	if pod.SandboxID == "" {
		return fmt.Errorf("pod %s/%s: no sandbox id known, so it cannot be stopped through the runtime", pod.Namespace, pod.Name)
	}
	if err := e.runtime.StopPodSandbox(ctx, pod.SandboxID); err != nil {
		return fmt.Errorf("stop the sandbox %s of pod %s/%s: %w", pod.SandboxID, pod.Namespace, pod.Name, err)
	}
	return nil
}
