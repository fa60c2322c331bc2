// Package cpuburst is the built-in hook for Koordinator's CPU burst (cpu-burst-config) on
// latency-sensitive (LS) pods: it sets the CFS burst (cpu.cfs_burst_us on cgroup v1, cpu.max.burst on v2)
// to cpuBurstPercent of each container's CFS quota, so a container that stayed under its limit may spend
// the saved time in a short spike instead of being throttled.
//
// Only LS pods burst, as in Koordinator: LSE and LSR containers run on CPUs of their own, where a quota
// burst buys nothing, and BE containers are the ones other classes are protected from.
//
// The CFS quota burst (raising cpu.cfs_quota_us of throttled LS containers up to cfsQuotaBurstPercent
// while the shared pool is idle) needs the pool's usage and each container's throttling over time, and
// writes running cgroups: a node loop does it (actuate/quotaburst), with QuotaBurst deciding each step.
package cpuburst

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/cgroup"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "cpuburst"

// Burst files by cgroup version.
const (
	FileV1 = "cpu.cfs_burst_us"
	FileV2 = "cpu.max.burst"
)

// maxCFSRuntimeUs is the kernel's bound on quota + burst (max_cfs_runtime, 2^44-1 µs).
const maxCFSRuntimeUs = cgroup.MaxQuota

// CPUBurst is the hook.
type CPUBurst struct {
	cfg  Config
	file string
}

var (
	_ hooks.PreRunPodSandboxHook            = (*CPUBurst)(nil)
	_ hooks.PreCreateContainerHook          = (*CPUBurst)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*CPUBurst)(nil)
)

// New validates cfg and detects the burst file. It returns an error wrapping hooks.ErrSkip when the
// policy sets no CFS burst or the kernel lacks it (Linux before 5.14).
func New(cfg Config, p cgroup.Prober) (*CPUBurst, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cpu burst config: %w", err)
	}
	if !cfg.SetsBurst() {
		return nil, fmt.Errorf("cpu burst policy %q sets no CFS burst (the CFS quota burst is the node loop's): %w", cfg.Policy, hooks.ErrSkip)
	}
	if p == nil {
		return nil, fmt.Errorf("no cgroup hierarchy: %w", hooks.ErrSkip)
	}
	file, ok := BurstFile(p)
	if !ok {
		return nil, fmt.Errorf("kernel offers no %s (CFS burst needs Linux 5.14+): %w", file, hooks.ErrSkip)
	}
	return &CPUBurst{cfg: cfg, file: file}, nil
}

// BurstFile names the CFS burst file of p's hierarchy (cpu.cfs_burst_us on v1, cpu.max.burst on v2)
// and reports whether the kernel offers it (Linux 5.14+).
func BurstFile(p cgroup.Prober) (string, bool) {
	file := FileV1
	if p.Version() == 2 {
		file = FileV2
	}
	return file, p.Supports(file)
}

// Name implements hooks.Hook.
func (b *CPUBurst) Name() string { return Name }

// Burst returns the CFS burst for a quota: percent of it, at most the quota itself (the kernel refuses
// more with EINVAL) and at most what keeps quota + burst within the kernel's bound. No quota, no burst;
// nor for a quota beyond the kernel's bound, which the kernel refuses anyway.
func Burst(quota, percent int64) int64 {
	if quota <= 0 || percent <= 0 || quota >= maxCFSRuntimeUs {
		return 0
	}
	return min(cgroup.Scale(quota, percent, 100), quota, maxCFSRuntimeUs-quota)
}

// burst returns the adjustment that sets the burst file for a pod's (pod true) or container's resources,
// or nil when it should not be touched.
func (b *CPUBurst) burst(class resqos.Class, r *hooks.Resources, pod bool) *hooks.Adjustment {
	if class != resqos.LS || r == nil || r.CPUQuota <= 0 {
		return nil
	}
	res := &hooks.ResourceAdjustment{Unified: map[string]string{b.file: strconv.FormatInt(Burst(r.CPUQuota, b.cfg.CPUBurstPercent), 10)}}
	if pod {
		return &hooks.Adjustment{PodResources: res}
	}
	return &hooks.Adjustment{Resources: res}
}

// PreRunPodSandbox sets the pod cgroup's burst from the pod-level quota kubelet sends (the sum of its
// containers' limits): a container's burst is of no use while its pod is throttled.
func (b *CPUBurst) PreRunPodSandbox(_ context.Context, pod *hooks.PodInfo) (*hooks.Adjustment, error) {
	return b.burst(qos.Class(pod, nil), pod.Resources, true), nil
}

// PreCreateContainer sets the container's burst. The front end has the runtime write it, or, on cgroup
// v1 where runc refuses unified files, writes it into the container's cgroup after the start.
func (b *CPUBurst) PreCreateContainer(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return b.burst(qos.Class(pod, ctr), ctr.Resources, false), nil
}

// PreUpdateContainerResources follows a new quota. The kernel refuses a quota below the current burst;
// the front end writes a running container's cgroup files before it forwards the update, so a lowered
// burst is in place before the runtime lowers the quota, and again after it, for a raised one.
func (b *CPUBurst) PreUpdateContainerResources(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return b.burst(qos.Class(pod, ctr), ctr.Resources, false), nil
}
