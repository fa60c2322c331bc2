package hooks

import (
	"maps"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// resourceFields declares each scalar field of Resources and ResourceAdjustment once. The merge's diff,
// claims and sizes, ApplyResources and Whole all read this table, so a new field is one line here beside
// its struct fields. The conversions to and from each protocol (CRI in package proxy, NRI in package nri,
// the hook servers' in hooks/remote) live at that protocol's edge: nothing here knows a wire format.
var resourceFields = [...]resourceField{
	scalar[int64]{"cpuPeriod", func(r *Resources) *int64 { return &r.CPUPeriod }, func(a *ResourceAdjustment) **int64 { return &a.CPUPeriod }},
	scalar[int64]{"cpuQuota", func(r *Resources) *int64 { return &r.CPUQuota }, func(a *ResourceAdjustment) **int64 { return &a.CPUQuota }},
	scalar[int64]{"cpuShares", func(r *Resources) *int64 { return &r.CPUShares }, func(a *ResourceAdjustment) **int64 { return &a.CPUShares }},
	scalar[int64]{"memoryLimitInBytes", func(r *Resources) *int64 { return &r.MemoryLimitInBytes }, func(a *ResourceAdjustment) **int64 { return &a.MemoryLimitInBytes }},
	scalar[int64]{"memorySwapLimitInBytes", func(r *Resources) *int64 { return &r.MemorySwapLimitInBytes }, func(a *ResourceAdjustment) **int64 { return &a.MemorySwapLimitInBytes }},
	scalar[int64]{"oomScoreAdj", func(r *Resources) *int64 { return &r.OomScoreAdj }, func(a *ResourceAdjustment) **int64 { return &a.OomScoreAdj }},
	scalar[string]{"cpusetCpus", func(r *Resources) *string { return &r.CpusetCpus }, func(a *ResourceAdjustment) **string { return &a.CpusetCpus }},
	scalar[string]{"cpusetMems", func(r *Resources) *string { return &r.CpusetMems }, func(a *ResourceAdjustment) **string { return &a.CpusetMems }},
	scalar[string]{"rdtClass", func(r *Resources) *string { return &r.RDTClass }, func(a *ResourceAdjustment) **string { return &a.RDTClass }},
}

// The two map fields: claimed key by key, so they are not in the table.
const (
	subHugepageLimits = "hugepageLimits"
	subUnified        = "unified"
)

// resourceField is what the merge and the conversions do with one scalar field.
type resourceField interface {
	fieldName() string
	// changed reports whether a sets the field to something other than cur's value.
	changed(a *ResourceAdjustment, cur *Resources) bool
	// set copies a's value into cur and out.
	set(a *ResourceAdjustment, cur *Resources, out *ResourceAdjustment)
	isSet(a *ResourceAdjustment) bool
	// bytes is what a's value takes in an answer: 8 for a number, its length for a string.
	bytes(a *ResourceAdjustment) int
	// whole sets a's field to r's value.
	whole(r *Resources, a *ResourceAdjustment)
}

type scalar[T int64 | string] struct {
	name string
	res  func(*Resources) *T
	adj  func(*ResourceAdjustment) **T
}

func (f scalar[T]) fieldName() string { return f.name }

func (f scalar[T]) changed(a *ResourceAdjustment, cur *Resources) bool {
	p := *f.adj(a)
	return p != nil && *p != *f.res(cur)
}

func (f scalar[T]) set(a *ResourceAdjustment, cur *Resources, out *ResourceAdjustment) {
	v := **f.adj(a)
	*f.res(cur) = v
	*f.adj(out) = &v
}

func (f scalar[T]) isSet(a *ResourceAdjustment) bool { return *f.adj(a) != nil }

func (f scalar[T]) bytes(a *ResourceAdjustment) int {
	if s, ok := any(**f.adj(a)).(string); ok {
		return len(s)
	}
	return 8
}

func (f scalar[T]) whole(r *Resources, a *ResourceAdjustment) {
	v := *f.res(r)
	*f.adj(a) = &v
}

// Whole returns an adjustment that sets every field to r's values: what to send the runtime to make a
// container's resources r.
func Whole(r *Resources) *ResourceAdjustment {
	a := &ResourceAdjustment{}
	if r == nil {
		return a
	}
	for _, f := range resourceFields {
		f.whole(r, a)
	}
	a.HugepageLimits, a.Unified = maps.Clone(r.HugepageLimits), maps.Clone(r.Unified)
	return a
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
	var scratch ResourceAdjustment
	for _, f := range resourceFields {
		if f.isSet(a) {
			f.set(a, out, &scratch)
		}
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

// Empty reports whether the adjustment sets nothing; nil sets nothing.
func (r *ResourceAdjustment) Empty() bool {
	if r == nil {
		return true
	}
	for _, f := range resourceFields {
		if f.isSet(r) {
			return false
		}
	}
	return len(r.HugepageLimits) == 0 && len(r.Unified) == 0
}

// RDTClass is the class an adjustment sets, else the one the container had.
func RDTClass(prev *Resources, a *ResourceAdjustment) string {
	switch {
	case a != nil && a.RDTClass != nil:
		return *a.RDTClass
	case prev != nil:
		return prev.RDTClass
	}
	return ""
}

// CgroupSettings turns a pod-level adjustment into the cgroup file settings a front end writes.
func (r *ResourceAdjustment) CgroupSettings() cgroup.Settings {
	return cgroup.Settings{
		CPUShares: r.CPUShares, CPUQuota: r.CPUQuota, CPUPeriod: r.CPUPeriod,
		CpusetCpus: r.CpusetCpus, CpusetMems: r.CpusetMems, MemoryLimit: r.MemoryLimitInBytes,
		Files: r.Unified,
	}
}

// QuotaRises reports whether a pod-level CFS quota a sets is at least cur's (unlimited is the most);
// true also when a sets none, as then the order does not matter. cgroup v1 refuses a container quota
// above its pod's, so a front end writes a rising pod quota before the containers' and a falling one
// after.
func QuotaRises(cur *Resources, a *ResourceAdjustment) bool {
	if a == nil || a.CPUQuota == nil || *a.CPUQuota <= 0 {
		return true
	}
	var was int64
	if cur != nil {
		was = cur.CPUQuota
	}
	return was > 0 && *a.CPUQuota >= was
}
