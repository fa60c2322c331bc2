package hooks

import (
	"maps"
	"slices"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// resourceFields declares each scalar field of Resources and ResourceAdjustment once. The merge's diff,
// claims and sizes, ApplyResources, and the conversions to and from CRI's and Koordinator's
// LinuxContainerResources (which share field names) all read this table, so a new field is one line here
// beside its struct fields. proto is the field's name in those messages, "" for a field they lack.
var resourceFields = [...]resourceField{
	scalar[int64]{"cpuPeriod", "cpu_period", func(r *Resources) *int64 { return &r.CPUPeriod }, func(a *ResourceAdjustment) **int64 { return &a.CPUPeriod }},
	scalar[int64]{"cpuQuota", "cpu_quota", func(r *Resources) *int64 { return &r.CPUQuota }, func(a *ResourceAdjustment) **int64 { return &a.CPUQuota }},
	scalar[int64]{"cpuShares", "cpu_shares", func(r *Resources) *int64 { return &r.CPUShares }, func(a *ResourceAdjustment) **int64 { return &a.CPUShares }},
	scalar[int64]{"memoryLimitInBytes", "memory_limit_in_bytes", func(r *Resources) *int64 { return &r.MemoryLimitInBytes }, func(a *ResourceAdjustment) **int64 { return &a.MemoryLimitInBytes }},
	scalar[int64]{"memorySwapLimitInBytes", "memory_swap_limit_in_bytes", func(r *Resources) *int64 { return &r.MemorySwapLimitInBytes }, func(a *ResourceAdjustment) **int64 { return &a.MemorySwapLimitInBytes }},
	scalar[int64]{"oomScoreAdj", "oom_score_adj", func(r *Resources) *int64 { return &r.OomScoreAdj }, func(a *ResourceAdjustment) **int64 { return &a.OomScoreAdj }},
	scalar[string]{"cpusetCpus", "cpuset_cpus", func(r *Resources) *string { return &r.CpusetCpus }, func(a *ResourceAdjustment) **string { return &a.CpusetCpus }},
	scalar[string]{"cpusetMems", "cpuset_mems", func(r *Resources) *string { return &r.CpusetMems }, func(a *ResourceAdjustment) **string { return &a.CpusetMems }},
	scalar[string]{"rdtClass", "", func(r *Resources) *string { return &r.RDTClass }, func(a *ResourceAdjustment) **string { return &a.RDTClass }},
}

// The two map fields: claimed key by key, so they are not in the table.
const (
	subHugepageLimits = "hugepageLimits"
	subUnified        = "unified"
	protoHugepages    = "hugepage_limits"
	protoUnified      = "unified"
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
	fromProto(m protoreflect.Message, r *Resources)
	// nonZero sets a's field to r's value unless that is zero: the hook protocol has no "unset".
	nonZero(r *Resources, a *ResourceAdjustment)
	toProto(m protoreflect.Message, a *ResourceAdjustment)
}

type scalar[T int64 | string] struct {
	name  string
	proto protoreflect.Name
	res   func(*Resources) *T
	adj   func(*ResourceAdjustment) **T
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

func (f scalar[T]) descriptor(m protoreflect.Message) protoreflect.FieldDescriptor {
	if f.proto == "" {
		return nil
	}
	return m.Descriptor().Fields().ByName(f.proto)
}

func (f scalar[T]) fromProto(m protoreflect.Message, r *Resources) {
	if fd := f.descriptor(m); fd != nil {
		*f.res(r) = m.Get(fd).Interface().(T)
	}
}

func (f scalar[T]) nonZero(r *Resources, a *ResourceAdjustment) {
	var zero T
	if v := *f.res(r); v != zero {
		*f.adj(a) = &v
	}
}

func (f scalar[T]) toProto(m protoreflect.Message, a *ResourceAdjustment) {
	if fd := f.descriptor(m); fd != nil && *f.adj(a) != nil {
		m.Set(fd, protoreflect.ValueOf(**f.adj(a)))
	}
}

// ResourcesFromProto reads CRI's or Koordinator's LinuxContainerResources; nil (or an invalid message)
// stays nil.
func ResourcesFromProto(m protoreflect.Message) *Resources {
	if m == nil || !m.IsValid() {
		return nil
	}
	r := &Resources{}
	for _, f := range resourceFields {
		f.fromProto(m, r)
	}
	fields := m.Descriptor().Fields()
	r.Unified = unifiedFromProto(m.Get(fields.ByName(protoUnified)).Map())
	r.HugepageLimits = hugepagesFromProto(m.Get(fields.ByName(protoHugepages)).List())
	return r
}

// AdjustmentFromProto reads the non-zero fields of a hook server's LinuxContainerResources: the protocol
// answers with plain values, so zero means "no change", and a hugepage limit without a page size says
// nothing. Nil when nothing is set.
func AdjustmentFromProto(m protoreflect.Message) *ResourceAdjustment {
	r := ResourcesFromProto(m)
	if r == nil {
		return nil
	}
	a := &ResourceAdjustment{Unified: r.Unified}
	for _, f := range resourceFields {
		f.nonZero(r, a)
	}
	delete(r.HugepageLimits, "")
	if len(r.HugepageLimits) > 0 {
		a.HugepageLimits = r.HugepageLimits
	}
	if a.empty() {
		return nil
	}
	return a
}

// unifiedFromProto copies the unified map; nil when it is empty.
func unifiedFromProto(u protoreflect.Map) map[string]string {
	if u.Len() == 0 {
		return nil
	}
	out := make(map[string]string, u.Len())
	u.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		out[k.String()] = v.String()
		return true
	})
	return out
}

func hugepagesFromProto(l protoreflect.List) map[string]uint64 {
	var out map[string]uint64
	for i := range l.Len() {
		h := l.Get(i).Message()
		fields := h.Descriptor().Fields()
		if out == nil {
			out = map[string]uint64{}
		}
		out[h.Get(fields.ByName("page_size")).String()] = h.Get(fields.ByName("limit")).Uint()
	}
	return out
}

// ApplyToProto writes an adjustment into CRI's or Koordinator's LinuxContainerResources: set fields
// replace, map entries are added or replaced (hugepage limits in page size order, so the same adjustment
// always makes the same bytes).
func ApplyToProto(m protoreflect.Message, a *ResourceAdjustment) {
	if a == nil {
		return
	}
	for _, f := range resourceFields {
		f.toProto(m, a)
	}
	fields := m.Descriptor().Fields()
	if len(a.Unified) > 0 {
		u := m.Mutable(fields.ByName(protoUnified)).Map()
		for k, v := range a.Unified {
			u.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(v))
		}
	}
	if len(a.HugepageLimits) == 0 {
		return
	}
	l := m.Mutable(fields.ByName(protoHugepages)).List()
	for _, size := range slices.Sorted(maps.Keys(a.HugepageLimits)) {
		limit := protoreflect.ValueOfUint64(a.HugepageLimits[size])
		replaced := false
		for i := range l.Len() {
			h := l.Get(i).Message()
			if h.Get(h.Descriptor().Fields().ByName("page_size")).String() == size {
				h.Set(h.Descriptor().Fields().ByName("limit"), limit)
				replaced = true
			}
		}
		if !replaced {
			h := l.NewElement()
			h.Message().Set(h.Message().Descriptor().Fields().ByName("page_size"), protoreflect.ValueOfString(size))
			h.Message().Set(h.Message().Descriptor().Fields().ByName("limit"), limit)
			l.Append(h)
		}
	}
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

func (r *ResourceAdjustment) empty() bool {
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
