package admission

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
	"github.com/tandemkit/tandem/resource/batch"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// The rules a pod is checked against; a refusal names the one it breaks.
const (
	RuleQoSClass             = "qos-class"
	RuleExclusiveCPUs        = "exclusive-cpus"
	RuleResourceSpec         = "resource-spec"
	RuleExtendedResourceSpec = "extended-resource-spec"
	RuleBatchNeedsBE         = "batch-resources-need-be"
	RuleBENotProd            = "be-not-in-prod-band"
)

// Koordinator's prod priority band: koord-prod is 9000, and any priority from 9000 to 9999.
const (
	prodPriorityMin = 9000
	prodPriorityMax = 9999
)

// Violation is one rule a pod breaks.
type Violation struct {
	Pod, Container, Rule, Message string
}

func (v Violation) Error() string {
	where := "pod " + v.Pod
	if v.Container != "" {
		where += ", container " + v.Container
	}
	return fmt.Sprintf("%s: rule %s: %s", where, v.Rule, v.Message)
}

// ValidatePod's rules each look at a pod carrying one of: the label koordinator.sh/qosClass, the
// annotations openfuyao.com/QoS-level, scheduling.koordinator.sh/resource-spec or
// node.koordinator.sh/extended-resource-spec, or batch resources. deploy/webhook/webhooks.yaml's
// matchConditions send the API server's call only for such pods: a rule on another key must be
// added there too (deploy_test checks the keys).

// ValidatePod checks a pod as it will be stored (after every mutating webhook) against the rules a
// node applies when it creates the pod's containers, so that a pod the node would refuse with
// CreateContainerError is refused by `kubectl apply` instead. It returns every rule broken, or nil.
func ValidatePod(pod *corev1.Pod) error {
	name := pod.Namespace + "/" + pod.Name
	if pod.Name == "" && pod.GenerateName != "" {
		name = pod.Namespace + "/" + pod.GenerateName + "*"
	}
	var errs []error
	add := func(container, rule, format string, args ...any) {
		errs = append(errs, Violation{Pod: name, Container: container, Rule: rule, Message: fmt.Sprintf(format, args...)})
	}
	r, err := resqos.Resolve(resqos.Input{Labels: pod.Labels, Annotations: pod.Annotations})
	if err != nil {
		add("", RuleQoSClass, "%v", stripErrdefs(err))
		return errors.Join(errs...) // the other rules depend on the class
	}
	class := r.Class
	all := make([]corev1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	all = append(all, pod.Spec.InitContainers...)
	all = append(all, pod.Spec.Containers...)
	if class.Exclusive() {
		for _, c := range all {
			if msg := exclusiveCPUs(c.Resources); msg != "" {
				add(c.Name, RuleExclusiveCPUs, "QoS class %s (%s) holds CPUs of its own, so it needs whole CPUs with requests.cpu equal to limits.cpu; %s", class, r.Source, msg)
			}
		}
	}
	info := &hooks.PodInfo{Annotations: pod.Annotations}
	if _, err := cpuset.BindPolicy(info); err != nil {
		add("", RuleResourceSpec, "%v", stripErrdefs(err))
	}
	if raw, ok := pod.Annotations[batch.AnnotationExtendedResourceSpec]; ok {
		if _, err := batch.ParseSpec(raw); err != nil {
			add("", RuleExtendedResourceSpec, "%v", stripErrdefs(err))
		}
	}
	if class != resqos.BE {
		for _, c := range all {
			for _, n := range []corev1.ResourceName{batch.CPU, batch.Memory} {
				_, req := c.Resources.Requests[n]
				_, lim := c.Resources.Limits[n]
				if req || lim {
					add(c.Name, RuleBatchNeedsBE, "asks for %s, which only BE pods may use, and its QoS class is %s (%s): label the pod %s=BE", n, class, r.Source, resqos.LabelKoordinator)
					break
				}
			}
		}
	}
	if class == resqos.BE && pod.Spec.Priority != nil && *pod.Spec.Priority >= prodPriorityMin && *pod.Spec.Priority <= prodPriorityMax {
		add("", RuleBENotProd, "QoS class BE and priority %d (the koord-prod band, %d-%d) cannot be used together: a BE pod runs on reclaimed capacity and must not preempt online pods", *pod.Spec.Priority, prodPriorityMin, prodPriorityMax)
	}
	return errors.Join(errs...)
}

// exclusiveCPUs says what is wrong with an exclusive container's CPU, or "".
func exclusiveCPUs(r corev1.ResourceRequirements) string {
	req, hasReq := r.Requests[corev1.ResourceCPU]
	lim, hasLim := r.Limits[corev1.ResourceCPU]
	switch {
	case !hasReq && !hasLim:
		return "it asks for no CPU"
	case !hasLim:
		return fmt.Sprintf("it has requests.cpu %s and no limits.cpu", req.String())
	case req.Cmp(lim) != 0:
		return fmt.Sprintf("it has requests.cpu %s and limits.cpu %s", req.String(), lim.String())
	case lim.Sign() <= 0 || lim.MilliValue()%1000 != 0:
		return fmt.Sprintf("it has requests.cpu and limits.cpu %s, not a whole number of CPUs (%s)", lim.String(), wholeCPUsNear(lim))
	}
	return ""
}

// wholeCPUsNear suggests the whole CPU counts around q.
func wholeCPUsNear(q resource.Quantity) string {
	lo := q.MilliValue() / 1000
	if lo < 1 {
		return "ask for 1"
	}
	return fmt.Sprintf("ask for %d or %d", lo, lo+1)
}

// stripErrdefs drops the ": invalid argument" errdefs appends: an admission message is read by a
// person, who has the rule's name instead.
func stripErrdefs(err error) string {
	return strings.TrimSuffix(err.Error(), ": invalid argument")
}
