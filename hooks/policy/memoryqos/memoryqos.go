// Package memoryqos is the built-in hook for Koordinator's memory QoS (seed 004's
// resource-qos-config memoryQOS): per QoS class it protects a share of each container's memory request
// from reclaim (memory.min, memory.low) and throttles it before its limit (memory.high), so that an LS
// container under memory pressure reclaims slowly instead of being OOM-killed, and a BE container is
// slowed down before it crowds the others out.
//
// On cgroup v2 the files are the kernel's own. On cgroup v1 mainline Linux offers none of them (the hook
// switches itself off); Anolis OS offers memory.min, memory.low and memory.high in the memory controller,
// and the hook uses whichever of them the kernel has.
//
// The memory request is not in CRI's LinuxContainerResources. The hook takes it, in this order, from a
// Requests source (the pod spec, when the proxy has one), from the memory.min that kubelet sends as the
// request on cgroup v2 when its MemoryQoS feature gate is on, and later from the annotation the hook
// recorded at creation. Without a request only memory.high, which needs the limit alone, is set.
package memoryqos

import (
	"context"
	"fmt"
	"strconv"

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
)

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

// New validates cfg and detects the files. It returns an error wrapping hooks.ErrSkip when no class is
// enabled or the kernel offers none of the files.
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
	for _, f := range []string{FileMin, FileLow, FileHigh} {
		if d.Cgroups.Supports(f) {
			m.files[f] = true
		}
	}
	if len(m.files) == 0 {
		return nil, fmt.Errorf("cgroup v%d memory controller offers none of memory.min, memory.low, memory.high (mainline cgroup v1 has none; use cgroup v2 or Anolis OS): %w",
			d.Cgroups.Version(), hooks.ErrSkip)
	}
	return m, nil
}

// Name implements hooks.Hook.
func (m *MemoryQoS) Name() string { return Name }

// Files returns the memory QoS files for a class's config, a request (0 = unknown) and a limit (0 or less
// = none). Percentages of 0 leave their file alone, as kubelet set it.
func Files(cc ClassConfig, request, limit int64) map[string]string {
	out := map[string]string{}
	if request > 0 && cc.MinLimitPercent > 0 {
		out[FileMin] = strconv.FormatInt(percent(request, cc.MinLimitPercent), 10)
	}
	if request > 0 && cc.LowLimitPercent > 0 {
		out[FileLow] = strconv.FormatInt(percent(request, cc.LowLimitPercent), 10)
	}
	if cc.ThrottlingPercent > 0 {
		out[FileHigh] = "max"
		if limit > 0 {
			out[FileHigh] = strconv.FormatInt(percent(limit, cc.ThrottlingPercent), 10)
		}
	}
	return out
}

// percent computes v × p / 100 without wrapping for any v and p: a negative memory.min would fail the
// container in runc.
func percent(v, p int64) int64 { return cgroup.Scale(v, p, 100) }

// files returns the files for a pod (ctr nil) or container that the kernel offers, or nil.
func (m *MemoryQoS) settings(pod *hooks.PodInfo, ctr *hooks.ContainerInfo, request int64, r *hooks.Resources) map[string]string {
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
	files := m.settings(pod, nil, m.request(ctx, pod, nil, true), pod.Resources)
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
	files := m.settings(pod, ctr, req, ctr.Resources)
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
	files := m.settings(pod, ctr, m.request(ctx, pod, ctr, false), ctr.Resources)
	if files == nil {
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{Unified: files}}, nil
}
