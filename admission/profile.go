package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation"

	resqos "github.com/tandemkit/tandem/resource/qos"
)

// ProfileResource is where the API server serves ClusterColocationProfiles (deploy/webhook/crd.yaml).
var ProfileResource = schema.GroupVersionResource{Group: "config.koordinator.sh", Version: "v1alpha1", Resource: "clustercolocationprofiles"}

// ClusterColocationProfile is Koordinator's profile, field for field, so that a Koordinator user's
// profiles apply unchanged. It is cluster-scoped.
type ClusterColocationProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterColocationProfileSpec `json:"spec,omitempty"`
}

// ClusterColocationProfileSpec says which pods a profile applies to and what it injects.
type ClusterColocationProfileSpec struct {
	// NamespaceSelector matches the labels of the pod's namespace; nil or empty matches every one.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Selector matches the pod's labels as the pod was submitted; nil or empty matches every pod.
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Probability applies the profile to this share of matching pods: an integer percentage or
	// "N%". Nil is 100.
	Probability *intstr.IntOrString `json:"probability,omitempty"`
	// QoSClass becomes the pod's koordinator.sh/qosClass label: LSE, LSR, LS, BE or SYSTEM.
	QoSClass string `json:"qosClass,omitempty"`
	// PriorityClassName becomes spec.priorityClassName, with the class's value in spec.priority and
	// its preemptionPolicy.
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// KoordinatorPriority becomes the pod's koordinator.sh/priority label (a sub-priority).
	KoordinatorPriority *int32 `json:"koordinatorPriority,omitempty"`
	// Labels and Annotations are set on the pod.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// LabelKeysMapping copies label k's value to label LabelKeysMapping[k]; AnnotationKeysMapping
	// does the same for annotations.
	LabelKeysMapping      map[string]string `json:"labelKeysMapping,omitempty"`
	AnnotationKeysMapping map[string]string `json:"annotationKeysMapping,omitempty"`
	// LabelSuffixes appends LabelSuffixes[k] to the value of label k, when the pod has it.
	LabelSuffixes map[string]string `json:"labelSuffixes,omitempty"`
	// SchedulerName becomes spec.schedulerName.
	SchedulerName string `json:"schedulerName,omitempty"`
	// Patch is a strategic merge patch of the pod, applied last.
	Patch json.RawMessage `json:"patch,omitempty"`
}

// Profile is a ClusterColocationProfile checked and ready to match: its selectors parsed, its
// patch decoded. Compile makes one.
type Profile struct {
	Name string
	// Created is when the API server stored the profile; pods older than it were never its to change.
	Created    time.Time
	Spec       ClusterColocationProfileSpec
	namespaces labels.Selector // nil matches every namespace
	pods       labels.Selector // nil matches every pod
	percent    int
	patch      map[string]any
}

// Keys of the labels a profile sets besides its own.
const (
	LabelKoordinatorPriority = "koordinator.sh/priority"
	LabelQoSClass            = resqos.LabelKoordinator
)

// podPatchMeta tells strategicpatch how a pod's lists merge (containers by name, and so on).
var podPatchMeta = mustPatchMeta()

func mustPatchMeta() strategicpatch.LookupPatchMeta {
	m, err := strategicpatch.NewPatchMetaFromStruct(corev1.Pod{})
	if err != nil {
		panic(fmt.Sprintf("strategic merge metadata of corev1.Pod: %v", err))
	}
	return m
}

// Compile checks a profile the way the API server cannot (its schema only says which fields
// exist) and returns it ready to match. Every problem is named, with the field.
func Compile(p *ClusterColocationProfile) (*Profile, error) {
	out := &Profile{Name: p.Name, Created: p.CreationTimestamp.Time, Spec: p.Spec, percent: 100}
	var errs []error
	field := func(f string, err error) { errs = append(errs, fmt.Errorf("spec.%s: %w", f, err)) }
	if s := p.Spec.NamespaceSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			field("namespaceSelector", err)
		}
		out.namespaces = sel
	}
	if s := p.Spec.Selector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
		sel, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			field("selector", err)
		}
		out.pods = sel
	}
	if p.Spec.Probability != nil {
		pct, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.Probability, 100, false)
		switch {
		case err != nil:
			field("probability", err)
		case pct < 0 || pct > 100:
			field("probability", fmt.Errorf("%s is not between 0 and 100%%", p.Spec.Probability.String()))
		}
		out.percent = pct
	}
	if p.Spec.QoSClass != "" {
		c, err := resqos.Parse(p.Spec.QoSClass)
		if err != nil {
			field("qosClass", err)
		} else if string(c) != p.Spec.QoSClass {
			field("qosClass", fmt.Errorf("%q: write it as %q, the value nodes read", p.Spec.QoSClass, c))
		}
	}
	if n := p.Spec.PriorityClassName; n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			field("priorityClassName", errors.New(msg))
		}
	}
	if n := p.Spec.SchedulerName; n != "" {
		for _, msg := range validation.IsDNS1123Subdomain(n) {
			field("schedulerName", errors.New(msg))
		}
	}
	checkLabels := func(f string, m map[string]string, values bool) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			for _, msg := range validation.IsQualifiedName(k) {
				field(f, fmt.Errorf("key %q: %s", k, msg))
			}
			if values {
				for _, msg := range validation.IsValidLabelValue(m[k]) {
					field(f, fmt.Errorf("value %q of %q: %s", m[k], k, msg))
				}
			}
		}
	}
	checkLabels("labels", p.Spec.Labels, true)
	checkLabels("annotations", p.Spec.Annotations, false)
	checkLabels("labelKeysMapping", p.Spec.LabelKeysMapping, false)
	checkLabels("labelKeysMapping", invert(p.Spec.LabelKeysMapping), false)
	checkLabels("annotationKeysMapping", p.Spec.AnnotationKeysMapping, false)
	checkLabels("annotationKeysMapping", invert(p.Spec.AnnotationKeysMapping), false)
	checkLabels("labelSuffixes", p.Spec.LabelSuffixes, false)
	if raw := p.Spec.Patch; len(raw) > 0 && string(raw) != "null" {
		var err error
		if out.patch, err = decodeObject(raw); err != nil {
			field("patch", fmt.Errorf("not a JSON object: %w", err))
		} else if err := checkPodPatch(out.patch); err != nil {
			field("patch", fmt.Errorf("not a strategic merge patch of a Pod: %w", err))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("ClusterColocationProfile %s: %w", p.Name, errors.Join(errs...))
	}
	return out, nil
}

func invert(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

// Matches reports whether the profile's selectors take a pod with these labels in a namespace
// with these labels.
func (p *Profile) Matches(namespaceLabels, podLabels map[string]string) bool {
	if p.namespaces != nil && !p.namespaces.Matches(labels.Set(namespaceLabels)) {
		return false
	}
	return p.pods == nil || p.pods.Matches(labels.Set(podLabels))
}

// NeedsNamespace reports whether matching needs the namespace's labels.
func (p *Profile) NeedsNamespace() bool { return p.namespaces != nil }

// Ordered returns the profiles in the order they apply: by name.
func Ordered(ps []*Profile) []*Profile {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b *Profile) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// checkPodPatch applies patch to an empty pod and decodes the result as a Pod, which catches a
// field of the wrong type (the merge itself only looks at lists and maps).
func checkPodPatch(patch map[string]any) error {
	merged, err := strategicpatch.StrategicMergeMapPatchUsingLookupPatchMeta(map[string]any{}, patch, podPatchMeta)
	if err != nil {
		return err
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return err
	}
	var pod corev1.Pod
	return json.Unmarshal(b, &pod)
}
