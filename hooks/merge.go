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
	stage Stage
	pod   *PodInfo
	ctr   *ContainerInfo
	out   Adjustment
	owner map[string]string
}

func newMerger(stage Stage, pod *PodInfo, ctr *ContainerInfo) *merger {
	return &merger{stage: stage, pod: pod.Clone(), ctr: ctr.Clone(), owner: map[string]string{}}
}

// change is one field an adjustment changes.
type change struct {
	field string
	apply func()
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

// apply adds one hook's adjustment, all or nothing.
func (m *merger) apply(hook string, a *Adjustment) error {
	if a.Empty() {
		return nil
	}
	changes := m.changes(a)
	conflicts := map[string]string{}
	for _, c := range changes {
		if o, ok := m.owner[c.field]; ok && o != hook {
			conflicts[c.field] = o
		}
	}
	if len(conflicts) > 0 {
		return &ConflictError{Hook: hook, Fields: conflicts}
	}
	for _, c := range changes {
		m.owner[c.field] = hook
		c.apply()
	}
	return nil
}

// result is the merged adjustment, or nil when nothing changed.
func (m *merger) result() *Adjustment {
	if m.out.Empty() {
		return nil
	}
	out := m.out
	return &out
}

func (m *merger) changes(a *Adjustment) []change {
	var cs []change
	sandbox := m.stage == PreRunPodSandbox
	if sandbox {
		cs = mapChanges(cs, "labels", a.Labels, &m.pod.Labels, &m.out.Labels)
		cs = mapChanges(cs, "annotations", a.Annotations, &m.pod.Annotations, &m.out.Annotations)
		if a.CgroupParent != nil && *a.CgroupParent != m.pod.CgroupParent {
			v := *a.CgroupParent
			cs = append(cs, change{"cgroupParent", func() { m.pod.CgroupParent = v; m.out.CgroupParent = &v }})
		}
	} else if m.ctr != nil {
		cs = mapChanges(cs, "labels", a.Labels, &m.ctr.Labels, &m.out.Labels)
		cs = mapChanges(cs, "annotations", a.Annotations, &m.ctr.Annotations, &m.out.Annotations)
		cs = mapChanges(cs, "env", a.Env, &m.ctr.Env, &m.out.Env)
		if a.Resources != nil {
			if m.ctr.Resources == nil {
				m.ctr.Resources = &Resources{}
			}
			if m.out.Resources == nil {
				m.out.Resources = &ResourceAdjustment{}
			}
			cs = resourceChanges(cs, "resources.", a.Resources, m.ctr.Resources, m.out.Resources)
		}
	}
	if a.PodResources != nil {
		if m.pod.Resources == nil {
			m.pod.Resources = &Resources{}
		}
		if m.out.PodResources == nil {
			m.out.PodResources = &ResourceAdjustment{}
		}
		cs = resourceChanges(cs, "podResources.", a.PodResources, m.pod.Resources, m.out.PodResources)
	}
	return cs
}

func mapChanges[V comparable](cs []change, name string, want map[string]V, cur, out *map[string]V) []change {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		v := want[k]
		if old, ok := (*cur)[k]; ok && old == v {
			continue
		}
		cs = append(cs, change{name + "[" + k + "]", func() {
			if *cur == nil {
				*cur = map[string]V{}
			}
			if *out == nil {
				*out = map[string]V{}
			}
			(*cur)[k] = v
			(*out)[k] = v
		}})
	}
	return cs
}

func scalarChange[V comparable](cs []change, field string, want *V, cur *V, out **V) []change {
	if want == nil || *want == *cur {
		return cs
	}
	v := *want
	return append(cs, change{field, func() { *cur = v; *out = &v }})
}

func resourceChanges(cs []change, prefix string, a *ResourceAdjustment, cur *Resources, out *ResourceAdjustment) []change {
	cs = scalarChange(cs, prefix+"cpuPeriod", a.CPUPeriod, &cur.CPUPeriod, &out.CPUPeriod)
	cs = scalarChange(cs, prefix+"cpuQuota", a.CPUQuota, &cur.CPUQuota, &out.CPUQuota)
	cs = scalarChange(cs, prefix+"cpuShares", a.CPUShares, &cur.CPUShares, &out.CPUShares)
	cs = scalarChange(cs, prefix+"memoryLimitInBytes", a.MemoryLimitInBytes, &cur.MemoryLimitInBytes, &out.MemoryLimitInBytes)
	cs = scalarChange(cs, prefix+"memorySwapLimitInBytes", a.MemorySwapLimitInBytes, &cur.MemorySwapLimitInBytes, &out.MemorySwapLimitInBytes)
	cs = scalarChange(cs, prefix+"oomScoreAdj", a.OomScoreAdj, &cur.OomScoreAdj, &out.OomScoreAdj)
	cs = scalarChange(cs, prefix+"cpusetCpus", a.CpusetCpus, &cur.CpusetCpus, &out.CpusetCpus)
	cs = scalarChange(cs, prefix+"cpusetMems", a.CpusetMems, &cur.CpusetMems, &out.CpusetMems)
	cs = mapChanges(cs, prefix+"hugepageLimits", a.HugepageLimits, &cur.HugepageLimits, &out.HugepageLimits)
	cs = mapChanges(cs, prefix+"unified", a.Unified, &cur.Unified, &out.Unified)
	return cs
}

// ApplyResources returns r with the adjustment applied; r is not modified.
func ApplyResources(r *Resources, a *ResourceAdjustment) *Resources {
	out := r.Clone()
	if out == nil {
		out = &Resources{}
	}
	if a == nil {
		return out
	}
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&out.CPUPeriod, a.CPUPeriod)
	set(&out.CPUQuota, a.CPUQuota)
	set(&out.CPUShares, a.CPUShares)
	set(&out.MemoryLimitInBytes, a.MemoryLimitInBytes)
	set(&out.MemorySwapLimitInBytes, a.MemorySwapLimitInBytes)
	set(&out.OomScoreAdj, a.OomScoreAdj)
	if a.CpusetCpus != nil {
		out.CpusetCpus = *a.CpusetCpus
	}
	if a.CpusetMems != nil {
		out.CpusetMems = *a.CpusetMems
	}
	for k, v := range a.HugepageLimits {
		if out.HugepageLimits == nil {
			out.HugepageLimits = map[string]uint64{}
		}
		out.HugepageLimits[k] = v
	}
	for k, v := range a.Unified {
		if out.Unified == nil {
			out.Unified = map[string]string{}
		}
		out.Unified[k] = v
	}
	return out
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
	if !a.Resources.empty() {
		fs = append(fs, "resources")
	}
	if !a.PodResources.empty() {
		fs = append(fs, "podResources")
	}
	slices.Sort(fs)
	return strings.Join(fs, ",") + " (" + strconv.Itoa(len(fs)) + ")"
}
