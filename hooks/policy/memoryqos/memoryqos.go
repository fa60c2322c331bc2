// Package memoryqos is the built-in hook for Koordinator's memory QoS (resource-qos-config's
// memoryQOS): per QoS class it protects a share of each container's memory request
// from reclaim (memory.min, memory.low) and throttles it before its limit (memory.high), so that an LS
// container under memory pressure reclaims slowly instead of being OOM-killed, and a BE container is
// slowed down before it crowds the others out. Where the kernel offers them it also sets the class's
// background reclaim watermarks and min-watermark adjustment (Anolis memory.wmark_ratio,
// memory.wmark_scale_factor, memory.wmark_min_adj), its OOM priority (Anolis memory.priority,
// memory.use_priority_oom) and group OOM kill (memory.oom.group), on pod and container cgroups as
// koordlet does.
//
// Every file is detected when the hook is built, through the cgroup.Prober it is given: cgroup v2 has
// memory.min, memory.low, memory.high and memory.oom.group; mainline cgroup v1 has none of the files (the
// hook switches itself off, the log line naming them); Anolis OS adds the others, on v1 and v2. The hook
// returns only the files the kernel offers, so that neither runc nor the front end fails a container over
// a file that is not there. Knobs says, per class and key, what applies on a node.
//
// The memory request is not in CRI's LinuxContainerResources. The hook takes it, in this order, from a
// Requests source (the pod spec, when the proxy has one), from the memory.min that kubelet sends as the
// request on cgroup v2 when its MemoryQoS feature gate is on, and later from the annotation the hook
// recorded at creation. Without a request only memory.high, which needs the limit alone, is set.
package memoryqos

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "memoryqos"

// AnnotationMemoryRequest records on the container the memory request the hook found at creation, so
// that later updates, which may carry the hook's own memory.min, do not mistake it for the request.
const AnnotationMemoryRequest = "tandem.io/memory-request"

// The files the hook sets.
const (
	FileMin  = "memory.min"
	FileLow  = "memory.low"
	FileHigh = "memory.high"
	// Anolis OS only.
	FileWmarkRatio       = "memory.wmark_ratio"
	FileWmarkScaleFactor = "memory.wmark_scale_factor"
	FileWmarkMinAdj      = "memory.wmark_min_adj"
	FilePriority         = "memory.priority"
	FileUsePriorityOOM   = "memory.use_priority_oom"
	// cgroup v2, and Anolis OS on v1.
	FileOOMGroup = "memory.oom.group"
)

// setting ties a memoryQOS key to the file it sets. Percentages of the request or limit are computed per
// container (Files); the other values are written as configured.
type setting struct {
	key, file string
	value     func(ClassConfig) int64
	// percentOf is "request" or "limit" for the percentages, "" for a value written as it is.
	percentOf string
}

// on tells whether cc sets the file: a value of 0 leaves it alone, and so does a negative percentage
// (Validate refuses it; only wmarkMinAdj may be negative).
func (s setting) on(cc ClassConfig) bool {
	v := s.value(cc)
	return v != 0 && (s.percentOf == "" || v > 0)
}

// settings lists every key the hook applies, in resource-qos-config's order.
func settings() []setting {
	return []setting{
		{"minLimitPercent", FileMin, func(c ClassConfig) int64 { return c.MinLimitPercent }, "request"},
		{"lowLimitPercent", FileLow, func(c ClassConfig) int64 { return c.LowLimitPercent }, "request"},
		{"throttlingPercent", FileHigh, func(c ClassConfig) int64 { return c.ThrottlingPercent }, "limit"},
		{"wmarkRatio", FileWmarkRatio, func(c ClassConfig) int64 { return c.WmarkRatio }, ""},
		{"wmarkScalePermill", FileWmarkScaleFactor, func(c ClassConfig) int64 { return c.WmarkScalePermill }, ""},
		{"wmarkMinAdj", FileWmarkMinAdj, func(c ClassConfig) int64 { return c.WmarkMinAdj }, ""},
		{"priorityEnable", FileUsePriorityOOM, func(c ClassConfig) int64 { return c.PriorityEnable }, ""},
		{"priority", FilePriority, func(c ClassConfig) int64 { return c.Priority }, ""},
		{"oomKillGroup", FileOOMGroup, func(c ClassConfig) int64 { return c.OomKillGroup }, ""},
	}
}

// wanted returns the files a class's config sets, whatever the kernel offers: those of its non-zero
// values.
func wanted(cc ClassConfig) []string {
	var out []string
	for _, s := range settings() {
		if s.on(cc) {
			out = append(out, s.file)
		}
	}
	return out
}

// Missing returns the files the enabled classes of cfg set that the kernel lacks, sorted; p nil lacks
// every one.
func Missing(cfg Config, p cgroup.Prober) []string {
	seen := map[string]bool{}
	var out []string
	for _, cl := range cfg.applied() {
		if !cl.cc.Enable {
			continue
		}
		for _, f := range wanted(cl.cc) {
			if !seen[f] && (p == nil || !p.Supports(f)) {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Requests tells memory requests from the pod spec. ctr nil asks for the pod's total. ok is false when
// the spec is unknown or has no request.
type Requests interface {
	MemoryRequest(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (bytes int64, ok bool)
}

// Deps are the hook's dependencies.
type Deps struct {
	Cgroups cgroup.Prober
	// Requests is optional; see the package doc.
	Requests Requests
}

// MemoryQoS is the hook.
type MemoryQoS struct {
	cfg      Config
	files    map[string]bool // the files the kernel offers
	requests Requests
}

var (
	_ hooks.PreRunPodSandboxHook            = (*MemoryQoS)(nil)
	_ hooks.PreCreateContainerHook          = (*MemoryQoS)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*MemoryQoS)(nil)
)

// New validates cfg and detects the files. It returns an error wrapping hooks.ErrSkip, which names the
// files the kernel lacks, when no class is enabled or the kernel offers none of the files the enabled
// classes set.
func New(cfg Config, d Deps) (*MemoryQoS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("memory QoS config: %w", err)
	}
	if !cfg.anyEnabled() {
		return nil, fmt.Errorf("memory QoS is disabled for every class: %w", hooks.ErrSkip)
	}
	if d.Cgroups == nil {
		return nil, fmt.Errorf("no cgroup hierarchy: %w", hooks.ErrSkip)
	}
	m := &MemoryQoS{cfg: cfg, files: map[string]bool{}, requests: d.Requests}
	var want int
	for _, cl := range cfg.applied() {
		if !cl.cc.Enable {
			continue
		}
		for _, f := range wanted(cl.cc) {
			want++
			if d.Cgroups.Supports(f) {
				m.files[f] = true
			}
		}
	}
	if want == 0 {
		return nil, fmt.Errorf("memory QoS is enabled, but every value of the enabled classes is 0: %w", hooks.ErrSkip)
	}
	if len(m.files) == 0 {
		return nil, fmt.Errorf("cgroup v%d memory controller offers none of the files the enabled classes set, missing %s (mainline cgroup v1 has none; use cgroup v2 or Anolis OS): %w",
			d.Cgroups.Version(), strings.Join(Missing(cfg, d.Cgroups), ", "), hooks.ErrSkip)
	}
	return m, nil
}

// Name implements hooks.Hook.
func (m *MemoryQoS) Name() string { return Name }

// Files returns the memory QoS files for a class's config, a request (0 = unknown) and a limit (0 or less
// = none), whatever the kernel offers. A value of 0 leaves its file alone, as the kernel or kubelet set
// it: memory.oom.group keeps kubelet's 1 on cgroup v2, and a new cgroup keeps the kernel's defaults.
func Files(cc ClassConfig, request, limit int64) map[string]string {
	out := map[string]string{}
	for _, s := range settings() {
		if !s.on(cc) {
			continue
		}
		v := s.value(cc)
		switch s.percentOf {
		case "request":
			if request > 0 {
				out[s.file] = strconv.FormatInt(percent(request, v), 10)
			}
		case "limit":
			out[s.file] = "max"
			if limit > 0 {
				out[s.file] = strconv.FormatInt(percent(limit, v), 10)
			}
		default:
			out[s.file] = strconv.FormatInt(v, 10)
		}
	}
	return out
}

// percent computes v × p / 100 without wrapping for any v and p: a negative memory.min would fail the
// container in runc.
func percent(v, p int64) int64 { return cgroup.Scale(v, p, 100) }

// filesFor returns the files for a pod (ctr nil) or container that the kernel offers, or nil.
func (m *MemoryQoS) filesFor(pod *hooks.PodInfo, ctr *hooks.ContainerInfo, request int64, r *hooks.Resources) map[string]string {
	cc, ok := m.cfg.For(qos.Class(pod, ctr))
	if !ok {
		return nil
	}
	var limit int64
	if r != nil {
		limit = r.MemoryLimitInBytes
	}
	out := Files(cc, request, limit)
	for f := range out {
		if !m.files[f] {
			delete(out, f)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// request finds a pod's (ctr nil) or container's memory request, 0 when unknown. kubelet's memory.min is
// trusted at creation only: later requests may carry the value this hook set.
func (m *MemoryQoS) request(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo, create bool) int64 {
	if m.requests != nil {
		if v, ok := m.requests.MemoryRequest(ctx, pod, ctr); ok && v > 0 {
			return v
		}
	}
	if ctr == nil {
		return 0
	}
	if v, err := strconv.ParseInt(ctr.Annotations[AnnotationMemoryRequest], 10, 64); err == nil && v > 0 {
		return v
	}
	if create && ctr.Resources != nil {
		if v, err := strconv.ParseInt(ctr.Resources.Unified[FileMin], 10, 64); err == nil && v > 0 {
			return v
		}
	}
	return 0
}

// PreRunPodSandbox sets the pod cgroup. Protection is hierarchical: a container's memory.min protects
// no more than its pod's does.
func (m *MemoryQoS) PreRunPodSandbox(ctx context.Context, pod *hooks.PodInfo) (*hooks.Adjustment, error) {
	files := m.filesFor(pod, nil, m.request(ctx, pod, nil, true), pod.Resources)
	if files == nil {
		return nil, nil
	}
	return &hooks.Adjustment{PodResources: &hooks.ResourceAdjustment{Unified: files}}, nil
}

// PreCreateContainer records the request and sets the files. The front end has the runtime write them,
// or, on cgroup v1 where runc refuses unified files, writes them into the container's cgroup after the
// start.
func (m *MemoryQoS) PreCreateContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	req := m.request(ctx, pod, ctr, true)
	files := m.filesFor(pod, ctr, req, ctr.Resources)
	if files == nil {
		return nil, nil
	}
	adj := &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{Unified: files}}
	if req > 0 {
		adj.Annotations = map[string]string{AnnotationMemoryRequest: strconv.FormatInt(req, 10)}
	}
	return adj, nil
}

// PreUpdateContainerResources follows a new limit.
func (m *MemoryQoS) PreUpdateContainerResources(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	files := m.filesFor(pod, ctr, m.request(ctx, pod, ctr, false), ctr.Resources)
	if files == nil {
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{Unified: files}}, nil
}
