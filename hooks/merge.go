package hooks

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// merger folds the adjustments of a stage's hooks into one, in order. Each hook sees the pod and container
// as the hooks before it left them. A field one hook changed is claimed by it; another hook changing it to
// a different value is a conflict. Setting a field to the value it already has is no change, so a remote
// hook that echoes the request back claims nothing.
type merger struct {
	stage  Stage
	pod    *PodInfo
	ctr    *ContainerInfo
	limits Limits
	// The inputs are copied on the first change only: most hooks change nothing for most pods.
	copied  bool
	out     Adjustment
	owner   map[field]string
	changed []field // scratch, reused across hooks
}

func newMerger(stage Stage, pod *PodInfo, ctr *ContainerInfo, limits Limits) *merger {
	return &merger{stage: stage, pod: pod, ctr: ctr, limits: limits}
}

// Field groups. Scalars have group "" in their field key only for cgroupParent.
const (
	groupLabels       = "labels"
	groupAnnotations  = "annotations"
	groupEnv          = "env"
	groupResources    = "resources"
	groupPodResources = "podResources"
)

// field names one adjustable field: a group and a name within it (a scalar's name, or a map key, with
// sub set for the resource maps). Strings are kept apart, not joined, so claims allocate nothing.
type field struct {
	group, sub, name string
	// res is 1 + the index in resourceFields of a scalar resource field, 0 for any other field.
	res int
}

func (f field) String() string {
	switch {
	case f.group == "":
		return f.name
	case f.sub != "":
		return f.group + "." + f.sub + "[" + f.name + "]"
	case f.group == groupResources || f.group == groupPodResources:
		return f.group + "." + f.name
	}
	return f.group + "[" + f.name + "]"
}

// ConflictError names the hooks that changed the same fields differently. It wraps errdefs.ErrConflict.
type ConflictError struct {
	Hook   string
	Fields map[string]string // field → the hook that changed it first
}

func (e *ConflictError) Error() string {
	parts := make([]string, 0, len(e.Fields))
	for _, f := range slices.Sorted(maps.Keys(e.Fields)) {
		parts = append(parts, fmt.Sprintf("%s (already set by %s)", f, e.Fields[f]))
	}
	return fmt.Sprintf("conflicting adjustment: changes %s; order the hooks so one owns each field", strings.Join(parts, ", "))
}

func (e *ConflictError) Unwrap() error { return errdefs.ErrConflict }

// TooLargeError says that a hook's answer adds more than Limits allow. It wraps
// errdefs.ErrResourceExhausted: the answer is refused as the hook failing, whatever its failure policy
// then makes of that.
type TooLargeError struct {
	// What is "answer" (the bytes the answer adds) or the metadata it grew ("pod" or "container").
	What  string
	Bytes int
	Limit int
}

func (e *TooLargeError) Error() string {
	if e.What == "answer" {
		return fmt.Sprintf("answer adds %d bytes (labels, annotations, env, cgroup files), above the %d one hook may add "+
			"(maxHookAnswerBytes); fix the hook so it adds less", e.Bytes, e.Limit)
	}
	return fmt.Sprintf("answer takes the %s's labels and annotations to %d bytes, above the %d a %s may carry "+
		"(maxMetadataBytes; the API server allows a pod 262144 bytes of annotations); fix the hook so it adds less",
		e.What, e.Bytes, e.Limit, e.What)
}

func (e *TooLargeError) Unwrap() error { return errdefs.ErrResourceExhausted }

// apply adds one hook's adjustment, all or nothing.
func (m *merger) apply(hook string, a *Adjustment) error {
	if a.Empty() {
		return nil
	}
	m.changed = m.diff(m.changed[:0], a)
	if len(m.changed) == 0 {
		return nil
	}
	if err := m.checkSize(a); err != nil {
		return err
	}
	var conflicts map[string]string
	for _, f := range m.changed {
		if o, ok := m.owner[f]; ok && o != hook {
			if conflicts == nil {
				conflicts = map[string]string{}
			}
			conflicts[f.String()] = o
		}
	}
	if conflicts != nil {
		return &ConflictError{Hook: hook, Fields: conflicts}
	}
	if !m.copied {
		m.pod, m.ctr, m.copied = m.pod.Clone(), m.ctr.Clone(), true
		m.owner = map[field]string{}
	}
	for _, f := range m.changed {
		m.owner[f] = hook
		m.set(f, a)
	}
	return nil
}

// checkSize refuses an answer whose changes exceed the limits. Only changed fields count, so a hook server
// that echoes a large pod back is not blamed for kubelet's bytes.
func (m *merger) checkSize(a *Adjustment) error {
	labels, annotations := m.target()
	added, grown := 0, 0
	for _, f := range m.changed {
		n := fieldBytes(f, a)
		added += n
		switch f.group {
		case groupLabels:
			grown += n - entryBytes(*labels, f.name)
		case groupAnnotations:
			grown += n - entryBytes(*annotations, f.name)
		}
	}
	if added > m.limits.MaxAnswerBytes {
		return &TooLargeError{What: "answer", Bytes: added, Limit: m.limits.MaxAnswerBytes}
	}
	if grown <= 0 {
		return nil
	}
	if total := MetadataBytes(*labels, *annotations) + grown; total > m.limits.MaxMetadataBytes {
		what := "container"
		if m.stage == PreRunPodSandbox || m.ctr == nil {
			what = "pod"
		}
		return &TooLargeError{What: what, Bytes: total, Limit: m.limits.MaxMetadataBytes}
	}
	return nil
}

// entryBytes is what key takes in m now, 0 when absent.
func entryBytes(m map[string]string, key string) int {
	if v, ok := m[key]; ok {
		return len(key) + len(v)
	}
	return 0
}

// fieldBytes is what a changed field of a takes: a map entry's key and value, a string's length, 8 bytes
// for a number.
func fieldBytes(f field, a *Adjustment) int {
	switch f.group {
	case "":
		return len(*a.CgroupParent)
	case groupLabels:
		return len(f.name) + len(a.Labels[f.name])
	case groupAnnotations:
		return len(f.name) + len(a.Annotations[f.name])
	case groupEnv:
		return len(f.name) + len(a.Env[f.name])
	}
	r := a.Resources
	if f.group == groupPodResources {
		r = a.PodResources
	}
	switch f.sub {
	case subUnified:
		return len(f.name) + len(r.Unified[f.name])
	case subHugepageLimits:
		return len(f.name) + 8
	}
	if f.res > 0 {
		return resourceFields[f.res-1].bytes(r)
	}
	return 8
}

// result is the merged adjustment, or nil when nothing changed.
func (m *merger) result() *Adjustment {
	if m.out.Empty() {
		return nil
	}
	out := m.out
	return &out
}

// target returns the labels and annotations an adjustment addresses at this stage: the sandbox's in
// PreRunPodSandbox, the container's otherwise.
func (m *merger) target() (labels, annotations *map[string]string) {
	if m.stage == PreRunPodSandbox || m.ctr == nil {
		return &m.pod.Labels, &m.pod.Annotations
	}
	return &m.ctr.Labels, &m.ctr.Annotations
}

// diff appends the fields a changes relative to the current state.
func (m *merger) diff(out []field, a *Adjustment) []field {
	labels, annotations := m.target()
	out = mapDiff(out, groupLabels, "", a.Labels, *labels)
	out = mapDiff(out, groupAnnotations, "", a.Annotations, *annotations)
	if m.stage == PreRunPodSandbox {
		if a.CgroupParent != nil && *a.CgroupParent != m.pod.CgroupParent {
			out = append(out, field{name: "cgroupParent"})
		}
	} else if m.ctr != nil {
		out = mapDiff(out, groupEnv, "", a.Env, m.ctr.Env)
		out = resourceDiff(out, groupResources, a.Resources, m.ctr.Resources)
	}
	return resourceDiff(out, groupPodResources, a.PodResources, m.pod.Resources)
}

func mapDiff[V comparable](out []field, group, sub string, want, cur map[string]V) []field {
	for k, v := range want {
		if old, ok := cur[k]; !ok || old != v {
			out = append(out, field{group: group, sub: sub, name: k})
		}
	}
	return out
}

func resourceDiff(out []field, group string, a *ResourceAdjustment, cur *Resources) []field {
	if a == nil {
		return out
	}
	if cur == nil {
		cur = &Resources{}
	}
	for i, f := range resourceFields {
		if f.changed(a, cur) {
			out = append(out, field{group: group, name: f.fieldName(), res: i + 1})
		}
	}
	out = mapDiff(out, group, subHugepageLimits, a.HugepageLimits, cur.HugepageLimits)
	return mapDiff(out, group, subUnified, a.Unified, cur.Unified)
}

// set copies one changed field from a into the current state and into the merged result.
func (m *merger) set(f field, a *Adjustment) {
	switch f.group {
	case "":
		v := *a.CgroupParent
		m.pod.CgroupParent, m.out.CgroupParent = v, &v
	case groupLabels:
		labels, _ := m.target()
		putBoth(labels, &m.out.Labels, f.name, a.Labels[f.name])
	case groupAnnotations:
		_, annotations := m.target()
		putBoth(annotations, &m.out.Annotations, f.name, a.Annotations[f.name])
	case groupEnv:
		putBoth(&m.ctr.Env, &m.out.Env, f.name, a.Env[f.name])
	case groupResources:
		if m.ctr.Resources == nil {
			m.ctr.Resources = &Resources{}
		}
		if m.out.Resources == nil {
			m.out.Resources = &ResourceAdjustment{}
		}
		setResource(f, a.Resources, m.ctr.Resources, m.out.Resources)
	case groupPodResources:
		if m.pod.Resources == nil {
			m.pod.Resources = &Resources{}
		}
		if m.out.PodResources == nil {
			m.out.PodResources = &ResourceAdjustment{}
		}
		setResource(f, a.PodResources, m.pod.Resources, m.out.PodResources)
	}
}

func putBoth[V any](cur, out *map[string]V, k string, v V) {
	if *cur == nil {
		*cur = map[string]V{}
	}
	if *out == nil {
		*out = map[string]V{}
	}
	(*cur)[k] = v
	(*out)[k] = v
}

func setResource(f field, a *ResourceAdjustment, cur *Resources, out *ResourceAdjustment) {
	switch f.sub {
	case subHugepageLimits:
		putBoth(&cur.HugepageLimits, &out.HugepageLimits, f.name, a.HugepageLimits[f.name])
		return
	case subUnified:
		putBoth(&cur.Unified, &out.Unified, f.name, a.Unified[f.name])
		return
	}
	if f.res > 0 {
		resourceFields[f.res-1].set(a, cur, out)
	}
}

// fieldsOf lists the fields an adjustment touches, for log lines.
func fieldsOf(a *Adjustment) string {
	if a.Empty() {
		return ""
	}
	var fs []string
	for k := range a.Labels {
		fs = append(fs, "labels["+k+"]")
	}
	for k := range a.Annotations {
		fs = append(fs, "annotations["+k+"]")
	}
	if a.CgroupParent != nil {
		fs = append(fs, "cgroupParent")
	}
	for k := range a.Env {
		fs = append(fs, "env["+k+"]")
	}
	if !a.Resources.Empty() {
		fs = append(fs, "resources")
	}
	if !a.PodResources.Empty() {
		fs = append(fs, "podResources")
	}
	slices.Sort(fs)
	return strings.Join(fs, ",") + " (" + strconv.Itoa(len(fs)) + ")"
}
