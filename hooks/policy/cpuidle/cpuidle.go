// Package cpuidle is the built-in hook that marks BE pod cgroups idle (cpu.idle = 1): mainline Linux's
// SCHED_IDLE for cgroups, which lets any other task preempt batch work at once. It is the vanilla-kernel
// answer to Alibaba's group identity; where the kernel is Anolis and offers cpu.bvt_warp_ns, the hook sets
// group identity by class too.
package cpuidle

import (
	"context"
	"fmt"
	"strconv"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "cpuidle"

// Config configures the hook.
type Config struct {
	// GroupIdentity is the cpu.bvt_warp_ns value per class where the kernel has it ([-1, 2]; seed 004's
	// resource-qos-config groupIdentity). Classes absent are left alone.
	GroupIdentity map[resqos.Class]int64 `json:"groupIdentity"`
}

// DefaultConfig uses the values of Koordinator's defaults: LS and LSR 2, BE -1.
func DefaultConfig() Config {
	return Config{GroupIdentity: map[resqos.Class]int64{resqos.LSR: 2, resqos.LS: 2, resqos.BE: -1}}
}

// Prober tells which cgroup files the kernel offers; resource/cgroup's writers are one.
type Prober interface{ Supports(file string) bool }

// CPUIdle is the hook.
type CPUIdle struct {
	cfg      Config
	idle     bool
	identity bool
}

var _ hooks.PreRunPodSandboxHook = (*CPUIdle)(nil)

// New detects the knobs and returns hooks.ErrSkip when the kernel has neither.
func New(cfg Config, p Prober) (*CPUIdle, error) {
	if p == nil {
		return nil, fmt.Errorf("no cgroup hierarchy: %w", hooks.ErrSkip)
	}
	c := &CPUIdle{cfg: cfg, idle: p.Supports("cpu.idle"), identity: p.Supports("cpu.bvt_warp_ns")}
	if !c.idle && !c.identity {
		return nil, fmt.Errorf("kernel offers neither cpu.idle (Linux 5.15+) nor cpu.bvt_warp_ns (Anolis): %w", hooks.ErrSkip)
	}
	return c, nil
}

// Name implements hooks.Hook.
func (c *CPUIdle) Name() string { return Name }

// PreRunPodSandbox sets the pod cgroup's knobs by class.
func (c *CPUIdle) PreRunPodSandbox(_ context.Context, pod *hooks.PodInfo) (*hooks.Adjustment, error) {
	class := qos.Class(pod, nil)
	files := map[string]string{}
	if c.idle && class == resqos.BE {
		files["cpu.idle"] = "1"
	}
	if v, ok := c.cfg.GroupIdentity[class]; ok && c.identity {
		files["cpu.bvt_warp_ns"] = strconv.FormatInt(v, 10)
	}
	if len(files) == 0 {
		return nil, nil
	}
	return &hooks.Adjustment{PodResources: &hooks.ResourceAdjustment{Unified: files}}, nil
}
