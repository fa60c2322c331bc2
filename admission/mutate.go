package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	resqos "github.com/tandemkit/tandem/resource/qos"
)

// AnnotationProfiles marks a pod the webhook admitted that some profile's selectors matched: the
// profiles applied to it, in order, comma-separated (empty when probability skipped them all).
// A matching pod without it was admitted while the webhook was down.
const AnnotationProfiles = "tandem.io/colocation-profiles"

// Cluster is what mutation looks up in the cluster; informers answer it from memory.
type Cluster interface {
	// NamespaceLabels returns the labels of a namespace.
	NamespaceLabels(ctx context.Context, name string) (map[string]string, error)
	// PriorityClass returns a PriorityClass by name.
	PriorityClass(ctx context.Context, name string) (*schedulingv1.PriorityClass, error)
}

// Mutator applies profiles to pods.
type Mutator struct {
	cluster  Cluster
	profiles func() []*Profile
	// intn draws the probability of a profile: a number in [0, n).
	intn func(n int) int
}

// NewMutator returns a Mutator; profiles returns the compiled profiles in the order they apply
// (Ordered), intn a random number in [0, n) (math/rand/v2.IntN).
func NewMutator(cluster Cluster, profiles func() []*Profile, intn func(int) int) *Mutator {
	return &Mutator{cluster: cluster, profiles: profiles, intn: intn}
}

// Mutation is what Mutate decided for one pod.
type Mutation struct {
	// Patch is the RFC 6902 patch to send back; empty when nothing changes.
	Patch []PatchOperation
	// Matched lists the profiles whose selectors matched; Applied those that were applied (the
	// others lost their probability draw).
	Matched, Applied []string
	// Batch is true when the pod's cpu and memory became batch resources.
	Batch bool
}

// Mutate applies every matching profile to the pod whose JSON is raw, as the API server sent it,
// converts a BE pod's resources, and writes the extended-resource-spec annotation. An error
// names the pod and what to fix; the pod is then refused, as the API server itself refuses a pod
// naming a PriorityClass that does not exist.
func (m *Mutator) Mutate(ctx context.Context, namespace string, raw []byte) (Mutation, error) {
	var out Mutation
	doc, err := decodeObject(raw)
	if err != nil {
		return out, fmt.Errorf("decode the pod: %w", err)
	}
	pod := podDoc(doc)
	original := podDoc(deepCopy(doc).(map[string]any))
	name := pod.displayName(namespace)
	submitted := pod.stringMap("metadata", "labels")
	var nsLabels map[string]string
	nsRead := false
	for _, p := range m.profiles() {
		if p.NeedsNamespace() && !nsRead {
			if nsLabels, err = m.cluster.NamespaceLabels(ctx, namespace); err != nil {
				return out, fmt.Errorf("pod %s: read the labels of namespace %s for the profiles' namespaceSelectors: %w", name, namespace, err)
			}
			nsRead = true
		}
		if !p.Matches(nsLabels, submitted) {
			continue
		}
		out.Matched = append(out.Matched, p.Name)
		if p.percent < 100 && (p.percent == 0 || m.intn(100) >= p.percent) {
			continue
		}
		if pod, err = m.apply(ctx, pod, p); err != nil {
			return out, fmt.Errorf("pod %s, ClusterColocationProfile %s: %w", name, p.Name, err)
		}
		out.Applied = append(out.Applied, p.Name)
	}
	if len(out.Matched) > 0 {
		pod.set(strings.Join(out.Applied, ","), "metadata", "annotations", AnnotationProfiles)
		// As Koordinator, only a pod some profile took has its resources converted: a BE pod
		// written by hand is expected to ask for batch resources itself.
		if pod.batch() {
			if err := convertPod(pod); err != nil {
				return out, fmt.Errorf("pod %s: %w", name, err)
			}
			out.Batch = true
		}
	}
	if err := annotateBatch(pod); err != nil {
		return out, fmt.Errorf("pod %s: %w", name, err)
	}
	if out.Patch, err = diff(original, pod); err != nil {
		return out, fmt.Errorf("pod %s: make the patch: %w", name, err)
	}
	return out, nil
}

// apply is one profile, in Koordinator's order: labels and annotations, the key mappings and
// suffixes, scheduler, QoS class, priority, sub-priority, then the patch, which may override any
// of them.
func (m *Mutator) apply(ctx context.Context, pod podDoc, p *Profile) (podDoc, error) {
	s := p.Spec
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		pod.set(s.Labels[k], "metadata", "labels", k)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Annotations)) {
		pod.set(s.Annotations[k], "metadata", "annotations", k)
	}
	copyKeys := func(kind string, mapping map[string]string) {
		current := pod.stringMap("metadata", kind)
		for _, from := range slices.Sorted(maps.Keys(mapping)) {
			if v, ok := current[from]; ok {
				pod.set(v, "metadata", kind, mapping[from])
			}
		}
	}
	copyKeys("labels", s.LabelKeysMapping)
	copyKeys("annotations", s.AnnotationKeysMapping)
	current := pod.stringMap("metadata", "labels")
	for _, k := range slices.Sorted(maps.Keys(s.LabelSuffixes)) {
		if v, ok := current[k]; ok {
			pod.set(v+s.LabelSuffixes[k], "metadata", "labels", k)
		}
	}
	if s.SchedulerName != "" {
		pod.set(s.SchedulerName, "spec", "schedulerName")
	}
	if s.QoSClass != "" {
		pod.set(s.QoSClass, "metadata", "labels", LabelQoSClass)
	}
	if s.PriorityClassName != "" {
		pc, err := m.cluster.PriorityClass(ctx, s.PriorityClassName)
		if err != nil {
			return pod, fmt.Errorf("PriorityClass %s: %w; create it (deploy/priorityclasses.yaml has Koordinator's four) or change spec.priorityClassName", s.PriorityClassName, err)
		}
		pod.set(s.PriorityClassName, "spec", "priorityClassName")
		pod.set(json.Number(strconv.FormatInt(int64(pc.Value), 10)), "spec", "priority")
		// The API server's Priority plugin copies these from the class before webhooks run, so the
		// class the profile names must bring its own.
		if pc.PreemptionPolicy != nil {
			pod.set(string(*pc.PreemptionPolicy), "spec", "preemptionPolicy")
		} else {
			delete(pod.object("spec"), "preemptionPolicy")
		}
	}
	if s.KoordinatorPriority != nil {
		pod.set(strconv.FormatInt(int64(*s.KoordinatorPriority), 10), "metadata", "labels", LabelKoordinatorPriority)
	}
	if p.patch != nil {
		patched, err := strategicpatch.StrategicMergeMapPatchUsingLookupPatchMeta(map[string]any(pod), p.patch, podPatchMeta)
		if err != nil {
			return pod, fmt.Errorf("spec.patch: %w", err)
		}
		pod = podDoc(patched)
	}
	return pod, nil
}

// batch reports whether the pod runs on batch resources: BE by its label, whether a profile set it
// or the pod had it. Koordinator converts by priority band instead; a koord-batch pod that is not
// BE would then ask for batch resources that only BE pods may use (its validation, and Tandem's,
// refuse it), so a profile must say BE for its pods to become batch.
func (pod podDoc) batch() bool {
	c, err := resqos.Parse(pod.stringMap("metadata", "labels")[LabelQoSClass])
	return err == nil && c == resqos.BE
}

// podDoc is a pod as generic JSON, so that fields this build of Tandem does not know survive.
type podDoc map[string]any

func decodeObject(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // int64 fields past 2^53 must come back exact
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	return m, nil
}

func (pod podDoc) displayName(namespace string) string {
	name, _ := pod.get("metadata", "name").(string)
	if name == "" {
		if g, _ := pod.get("metadata", "generateName").(string); g != "" {
			name = g + "*"
		}
	}
	return namespace + "/" + name
}

func (pod podDoc) get(path ...string) any {
	var cur any = map[string]any(pod)
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// object returns the object at path, made if absent (or not an object).
func (pod podDoc) object(path ...string) map[string]any {
	cur := map[string]any(pod)
	for _, k := range path {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	return cur
}

func (pod podDoc) set(v any, path ...string) {
	pod.object(path[:len(path)-1]...)[path[len(path)-1]] = v
}

func (pod podDoc) stringMap(path ...string) map[string]string {
	m, _ := pod.get(path...).(map[string]any)
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// containers returns the pod's init containers and containers, each as an object.
func (pod podDoc) containers() []map[string]any {
	var out []map[string]any
	for _, kind := range []string{"initContainers", "containers"} {
		list, _ := pod.get("spec", kind).([]any)
		for _, c := range list {
			if m, ok := c.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}
