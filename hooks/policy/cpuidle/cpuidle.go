// Package cpuidle is the built-in hook that marks BE pod cgroups idle (cpu.idle = 1): mainline Linux's
// SCHED_IDLE for cgroups, which lets the pod's siblings preempt batch work at once. It is the
// vanilla-kernel answer to Alibaba's group identity; where the kernel is Anolis and offers
// cpu.bvt_warp_ns, the hook sets group identity by class too. When a BE container has started it tells
// the node loop that makes BE threads yield (actuate/yield), so the container's threads yield to
// every other thread on the node from their first milliseconds, not from the loop's next sweep.
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
	// GroupIdentity is the cpu.bvt_warp_ns value per class where the kernel has it ([-1, 2];
	// resource-qos-config's groupIdentity, as operators set it for Koordinator). Classes absent are left
	// alone.
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
	cfg       Config
	idle      bool
	identity  bool
	beStarted func()
}

var (
	_ hooks.PreRunPodSandboxHook   = (*CPUIdle)(nil)
	_ hooks.PostStartContainerHook = (*CPUIdle)(nil)
)

// New detects the knobs. beStarted, if not nil, is called when a BE container has started; it must not
// block. Without either knob and without beStarted there is nothing to do: hooks.ErrSkip.
func New(cfg Config, p Prober, beStarted func()) (*CPUIdle, error) {
	c := &CPUIdle{cfg: cfg, beStarted: beStarted}
	if p != nil {
		c.idle, c.identity = p.Supports("cpu.idle"), p.Supports("cpu.bvt_warp_ns")
	}
	if !c.idle && !c.identity && beStarted == nil {
		return nil, fmt.Errorf("kernel offers neither cpu.idle (Linux 5.15+) nor cpu.bvt_warp_ns (Anolis): %w", hooks.ErrSkip)
	}
	return c, nil
}

// PostStartContainer tells the BE thread scheduling loop that a BE container runs.
func (c *CPUIdle) PostStartContainer(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) error {
	if c.beStarted != nil && qos.Class(pod, ctr) == resqos.BE {
		c.beStarted()
	}
	return nil
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
