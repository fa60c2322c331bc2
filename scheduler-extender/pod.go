package extender

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/resource/qos"
)

const daemonSetKind = "DaemonSet"

// systemCriticalPriority is the priority of system-cluster-critical, the lowest of the two classes
// Kubernetes reserves for what the cluster cannot run without.
const systemCriticalPriority = 2000000000

// UsageThresholdsAnnotation overrides Config.UsageThresholds on one node. Its value has the JSON
// shape of usageThresholds, e.g. {"cpu":50,"memory":90}; a resource left out keeps the cluster value.
const UsageThresholdsAnnotation = "tandem.io/usage-thresholds"

// demand is what one pod asks of a node, reduced to the numbers filter and score need.
type demand struct {
	batchCPU, batchMemory int64 // kubernetes.io/batch-* requests: milli-cores, bytes
	estCPU, estMemory     int64 // usage expected once it runs: milli-cores, bytes
	be                    bool  // best-effort: its usage does not lower reclaimable capacity
	daemonSet             bool
	// critical: system-cluster-critical or system-node-critical (tandem-webhook, DNS, ...).
	critical bool
}

// exempt reports whether load and metric age never keep the pod off a node: a DaemonSet pod is
// bound to its node anyway, and a system-critical one (an admission webhook, DNS) left pending
// because nodes are busy would cost the cluster more than the load it adds.
func (d demand) exempt() bool { return d.daemonSet || d.critical }

func (d demand) batch() bool { return d.batchCPU > 0 || d.batchMemory > 0 }

// demandOf reads a pod's requests. Pods are the scheduler's own view, so requests, not limits,
// are what capacity is measured against; usage is estimated from requests because that is what
// the owner declared it needs.
func demandOf(pod *corev1.Pod, def EstimatedUsage) demand {
	d := demand{
		batchCPU:    podRequest(pod, nodemetric.ResourceBatchCPU, false),
		batchMemory: podRequest(pod, nodemetric.ResourceBatchMemory, false),
	}
	if d.batch() {
		d.be = true
		d.estCPU, d.estMemory = d.batchCPU, d.batchMemory
	} else {
		d.estCPU = podRequest(pod, corev1.ResourceCPU, true)
		d.estMemory = podRequest(pod, corev1.ResourceMemory, false)
		d.be = qosClass(pod) == qos.BE
	}
	if d.estCPU == 0 {
		d.estCPU = def.CPUMilli
	}
	if d.estMemory == 0 {
		d.estMemory = def.MemoryBytes
	}
	d.critical = pod.Spec.Priority != nil && *pod.Spec.Priority >= systemCriticalPriority
	for _, ref := range pod.OwnerReferences {
		if ref.Kind == daemonSetKind && ref.Controller != nil && *ref.Controller {
			d.daemonSet = true
		}
	}
	return d
}

// podRequest is the effective request of one resource, as kube-scheduler computes it: regular
// containers and restartable (sidecar) init containers add up, a plain init container only needs
// room while it runs, and pod overhead comes on top. Pod-level resources win when set.
func podRequest(pod *corev1.Pod, name corev1.ResourceName, milli bool) int64 {
	value := func(rl corev1.ResourceList) int64 {
		q, ok := rl[name]
		if !ok {
			return 0
		}
		if milli {
			return q.MilliValue()
		}
		return q.Value()
	}
	overhead := value(pod.Spec.Overhead)
	if pod.Spec.Resources != nil {
		if _, ok := pod.Spec.Resources.Requests[name]; ok {
			return value(pod.Spec.Resources.Requests) + overhead
		}
	}
	var sidecars, initMax, regular int64
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := value(c.Resources.Requests)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars += r
			continue
		}
		initMax = max(initMax, sidecars+r)
	}
	for i := range pod.Spec.Containers {
		regular += value(pod.Spec.Containers[i].Resources.Requests)
	}
	return max(regular+sidecars, initMax) + overhead
}

// qosClass is the class the node will give the pod, read from the same dialects (the label wins
// over the annotation); without either, Kubernetes' BestEffort is BE and the rest LS. A value the
// node refuses is "": such a pod never runs there as BE.
func qosClass(pod *corev1.Pod) qos.Class {
	r, err := qos.Resolve(qos.Input{Labels: pod.Labels, Annotations: pod.Annotations})
	switch {
	case err != nil:
		return ""
	case r.Source != qos.FromKubernetes:
		return r.Class
	case bestEffort(pod):
		return qos.BE
	}
	return qos.LS
}

// bestEffort is Kubernetes' BestEffort QoS class: no CPU or memory request or limit anywhere.
func bestEffort(pod *corev1.Pod) bool {
	has := func(c *corev1.Container) bool {
		for _, rl := range []corev1.ResourceList{c.Resources.Requests, c.Resources.Limits} {
			if _, ok := rl[corev1.ResourceCPU]; ok {
				return true
			}
			if _, ok := rl[corev1.ResourceMemory]; ok {
				return true
			}
		}
		return false
	}
	for i := range pod.Spec.InitContainers {
		if has(&pod.Spec.InitContainers[i]) {
			return false
		}
	}
	for i := range pod.Spec.Containers {
		if has(&pod.Spec.Containers[i]) {
			return false
		}
	}
	return true
}

// runningSince is when the last of a pod's containers started, or zero while any is not running.
// A node metric counts a pod fully only if it ran through the whole sample window.
func runningSince(pod *corev1.Pod) time.Time {
	if pod.Status.Phase != corev1.PodRunning || len(pod.Status.ContainerStatuses) == 0 {
		return time.Time{}
	}
	var latest time.Time
	for i := range pod.Status.ContainerStatuses {
		r := pod.Status.ContainerStatuses[i].State.Running
		if r == nil {
			return time.Time{}
		}
		if r.StartedAt.After(latest) {
			latest = r.StartedAt.Time
		}
	}
	return latest
}

// trimPod keeps only the fields the cache reads, so that the informer store for every assigned
// pod of a 5000-node cluster stays small.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	t := &corev1.Pod{}
	t.Name, t.Namespace, t.UID, t.ResourceVersion = pod.Name, pod.Namespace, pod.UID, pod.ResourceVersion
	t.DeletionTimestamp = pod.DeletionTimestamp
	// Whether a bound pod took a reservation: its controller and its age (heldRoom.takenBy).
	// Labels are not kept, so a reservation naming its owners by label selector is taken only
	// once it leaves Available.
	t.CreationTimestamp = pod.CreationTimestamp
	if ref := metav1.GetControllerOf(pod); ref != nil {
		t.OwnerReferences = []metav1.OwnerReference{{Kind: ref.Kind, Name: ref.Name, UID: ref.UID, Controller: ptr.To(true)}}
	}
	if v, ok := pod.Labels[qos.LabelKoordinator]; ok {
		t.Labels = map[string]string{qos.LabelKoordinator: v}
	}
	if v, ok := pod.Annotations[qos.AnnotationOpenFuyao]; ok {
		t.Annotations = map[string]string{qos.AnnotationOpenFuyao: v}
	}
	t.Spec.NodeName = pod.Spec.NodeName
	t.Spec.Overhead = pod.Spec.Overhead
	t.Spec.Resources = pod.Spec.Resources
	trimContainers := func(in []corev1.Container) []corev1.Container {
		out := make([]corev1.Container, len(in))
		for i := range in {
			out[i] = corev1.Container{Name: in[i].Name, Resources: in[i].Resources, RestartPolicy: in[i].RestartPolicy}
		}
		return out
	}
	t.Spec.InitContainers = trimContainers(pod.Spec.InitContainers)
	t.Spec.Containers = trimContainers(pod.Spec.Containers)
	t.Status.Phase = pod.Status.Phase
	t.Status.ContainerStatuses = make([]corev1.ContainerStatus, len(pod.Status.ContainerStatuses))
	for i, cs := range pod.Status.ContainerStatuses {
		t.Status.ContainerStatuses[i] = corev1.ContainerStatus{Name: cs.Name, State: corev1.ContainerState{Running: cs.State.Running}}
	}
	return t, nil
}

// trimNode keeps what the cache reads from a Node: its name, version, annotations and allocatable.
// Images and conditions make up most of a Node object and are never looked at.
func trimNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	t := &corev1.Node{}
	t.Name, t.UID, t.ResourceVersion = node.Name, node.UID, node.ResourceVersion
	for _, key := range []string{nodemetric.AnnotationKey, UsageThresholdsAnnotation} {
		if v, ok := node.Annotations[key]; ok {
			if t.Annotations == nil {
				t.Annotations = map[string]string{}
			}
			t.Annotations[key] = v
		}
	}
	t.Status.Allocatable = node.Status.Allocatable
	return t, nil
}
