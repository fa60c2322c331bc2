// Package cpuburst is the built-in hook for Koordinator's CPU burst (seed 004's cpu-burst-config) on
// latency-sensitive (LS) pods: it sets the CFS burst (cpu.cfs_burst_us on cgroup v1, cpu.max.burst on v2)
// to cpuBurstPercent of each container's CFS quota, so a container that stayed under its limit may spend
// the saved time in a short spike instead of being throttled.
//
// Only LS pods burst, as in Koordinator: LSE and LSR containers run on CPUs of their own, where a quota
// burst buys nothing, and BE containers are the ones other classes are protected from.
//
// The CFS quota burst (raising cpu.cfs_quota_us up to cfsQuotaBurstPercent while the shared pool is idle)
// needs the pool's usage over time, which the node metrics deliver later. Until then it is QuotaBurst, a
// pure decision function with no loop driving it.
package cpuburst

import (
	"context"
	"fmt"
	"path"
	"strconv"

	"k8s.io/klog/v2"

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

// Cgroups is what the hook needs of the node's cgroups; resource/cgroup's Writer is one.
type Cgroups interface {
	Supports(file string) bool
	Version() int
	Write(parent string, s cgroup.Settings) error
}

// Deps are the hook's dependencies.
type Deps struct {
	// Cgroups detects the burst file and writes container cgroups directly where the runtime cannot.
	Cgroups Cgroups
	// ContainerCgroup names a container's cgroup as the runtime created it (ContainerdCgroup for
	// containerd). Nil switches off direct writes: on cgroup v1 containers then get no burst, only pods.
	ContainerCgroup func(pod *hooks.PodInfo, ctr *hooks.ContainerInfo) string
}

// ContainerdCgroup is containerd's naming of a container's cgroup: <pod cgroup>/<id> with the cgroupfs
// driver, <pod slice path>/cri-containerd-<id>.scope with the systemd driver.
func ContainerdCgroup(pod *hooks.PodInfo, ctr *hooks.ContainerInfo) string {
	p := cgroup.Path(pod.CgroupParent)
	if path.Ext(pod.CgroupParent) == ".slice" {
		return path.Join(p, "cri-containerd-"+ctr.ID+".scope")
	}
	return path.Join(p, ctr.ID)
}

// CPUBurst is the hook.
type CPUBurst struct {
	cfg       Config
	cg        Cgroups
	file      string
	ctrCgroup func(*hooks.PodInfo, *hooks.ContainerInfo) string
}

var (
	_ hooks.PreRunPodSandboxHook            = (*CPUBurst)(nil)
	_ hooks.PreCreateContainerHook          = (*CPUBurst)(nil)
	_ hooks.PostStartContainerHook          = (*CPUBurst)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*CPUBurst)(nil)
)

// New validates cfg and detects the burst file. It returns an error wrapping hooks.ErrSkip when the
// policy sets no CFS burst or the kernel lacks it (Linux before 5.14).
func New(cfg Config, d Deps) (*CPUBurst, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cpu burst config: %w", err)
	}
	if !cfg.cfsBurst() {
		return nil, fmt.Errorf("cpu burst policy %q sets no CFS burst (the CFS quota burst waits for node usage metrics): %w", cfg.Policy, hooks.ErrSkip)
	}
	if d.Cgroups == nil {
		return nil, fmt.Errorf("no cgroup hierarchy: %w", hooks.ErrSkip)
	}
	file := FileV1
	if d.Cgroups.Version() == 2 {
		file = FileV2
	}
	if !d.Cgroups.Supports(file) {
		return nil, fmt.Errorf("kernel offers no %s (CFS burst needs Linux 5.14+): %w", file, hooks.ErrSkip)
	}
	return &CPUBurst{cfg: cfg, cg: d.Cgroups, file: file, ctrCgroup: d.ContainerCgroup}, nil
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

// burst returns the burst file's value for a container's resources, or "" when it should not be touched.
func (b *CPUBurst) burst(class resqos.Class, r *hooks.Resources) string {
	if class != resqos.LS || r == nil || r.CPUQuota <= 0 {
		return ""
	}
	return strconv.FormatInt(Burst(r.CPUQuota, b.cfg.CPUBurstPercent), 10)
}

// PreRunPodSandbox sets the pod cgroup's burst from the pod-level quota kubelet sends (the sum of its
// containers' limits): a container's burst is of no use while its pod is throttled.
func (b *CPUBurst) PreRunPodSandbox(_ context.Context, pod *hooks.PodInfo) (*hooks.Adjustment, error) {
	v := b.burst(qos.Class(pod, nil), pod.Resources)
	if v == "" {
		return nil, nil
	}
	return &hooks.Adjustment{PodResources: &hooks.ResourceAdjustment{Unified: map[string]string{b.file: v}}}, nil
}

// PreCreateContainer sets the burst through the runtime on cgroup v2. runc refuses unified files on
// cgroup v1, so there PostStartContainer writes the container's cgroup instead.
func (b *CPUBurst) PreCreateContainer(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	if b.cg.Version() != 2 {
		return nil, nil
	}
	v := b.burst(qos.Class(pod, ctr), ctr.Resources)
	if v == "" {
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{Unified: map[string]string{b.file: v}}}, nil
}

// PostStartContainer writes the burst into the container's cgroup on cgroup v1, which exists by now.
func (b *CPUBurst) PostStartContainer(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) error {
	if b.cg.Version() == 2 || b.ctrCgroup == nil {
		return nil
	}
	v := b.burst(qos.Class(pod, ctr), ctr.Resources)
	if v == "" {
		return nil
	}
	if err := b.cg.Write(b.ctrCgroup(pod, ctr), cgroup.Settings{Files: map[string]string{b.file: v}}); err != nil {
		return fmt.Errorf("set CFS burst of container %s: %w", ctr.ID, err)
	}
	return nil
}

// PreUpdateContainerResources follows a new quota. The kernel refuses a quota below the current burst,
// so the hook lowers the burst in the container's cgroup before the runtime lowers the quota; without
// that a downward resize would fail. Raising the burst above the old quota fails at this point and is
// expected: on cgroup v2 the runtime writes the raised burst after the quota; on v1 the container keeps
// its old (valid) burst until it restarts.
func (b *CPUBurst) PreUpdateContainerResources(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	v := b.burst(qos.Class(pod, ctr), ctr.Resources)
	if v == "" {
		return nil, nil
	}
	if b.ctrCgroup != nil {
		if err := b.cg.Write(b.ctrCgroup(pod, ctr), cgroup.Settings{Files: map[string]string{b.file: v}}); err != nil {
			klog.FromContext(ctx).V(2).Info("CFS burst not changed before the quota", "container", ctr.ID, "burst", v, "err", err)
		}
	}
	if b.cg.Version() != 2 {
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{Unified: map[string]string{b.file: v}}}, nil
}
