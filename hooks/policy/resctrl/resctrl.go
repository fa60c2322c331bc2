// Package resctrl is the built-in hook for RDT (resource-qos-config's resctrlQOS): it gives
// each QoS class a resctrl control group (LSR, LS, BE) with its share of the L3 cache ways and of the
// memory bandwidth, and moves every started container's tasks into its class's group, so batch work
// cannot evict the cache lines latency-sensitive work depends on.
//
// The hook names the group as the container's RDT class in its Adjustment; the front end moves the
// container's tasks once it runs, and again at every update, which repairs a task forked between the start
// and the move (a task started later inherits the group from its parent).
package resctrl

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	rdt "github.com/tandemkit/tandem/resource/resctrl"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "resctrl"

// Deps are the hook's dependencies.
type Deps struct {
	// Root is the resctrl mount; empty means /sys/fs/resctrl.
	Root string
}

// Resctrl is the hook.
type Resctrl struct {
	groups map[string]bool // the groups of enabled classes
}

var (
	_ hooks.PreCreateContainerHook          = (*Resctrl)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*Resctrl)(nil)
)

// New validates cfg, opens resctrl and creates or updates the groups of the enabled classes. It returns
// an error wrapping hooks.ErrSkip when no class is enabled, resctrl is absent or unmounted, or the
// hardware has too few CLOSIDs for the groups.
func New(cfg Config, d Deps) (*Resctrl, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("resctrl config: %w", err)
	}
	var enabled []class
	for _, c := range cfg.classes() {
		if c.cfg.Enable {
			enabled = append(enabled, c)
		}
	}
	if len(enabled) == 0 {
		return nil, fmt.Errorf("RDT is disabled for every class: %w", hooks.ErrSkip)
	}
	root := d.Root
	if root == "" {
		root = rdt.DefaultRoot
	}
	fs, err := rdt.Open(root)
	if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrNotImplemented) {
		return nil, fmt.Errorf("%w: %w", err, hooks.ErrSkip)
	}
	if err != nil {
		return nil, err
	}
	// The root group holds one CLOSID.
	if n := fs.NumClosids(); len(enabled) >= n {
		return nil, fmt.Errorf("the hardware has %d CLOSIDs, too few for the root group and %d class groups: %w", n, len(enabled), hooks.ErrSkip)
	}
	r := &Resctrl{groups: map[string]bool{}}
	for _, c := range enabled {
		var s rdt.Schemata
		if fs.L3 != nil {
			if s.L3Mask, err = rdt.L3Mask(fs.L3.CBMMask, fs.L3.MinCBMBits, c.cfg.CatRangeStartPercent, c.cfg.CatRangeEndPercent); err != nil {
				return nil, fmt.Errorf("%s.resctrlQOS: %w", c.json, err)
			}
		}
		if fs.MB != nil {
			if s.MB, err = rdt.MBValue(*fs.MB, c.cfg.MBAPercent); err != nil {
				return nil, fmt.Errorf("%s.resctrlQOS: %w", c.json, err)
			}
		}
		if err := fs.EnsureGroup(c.group, s); err != nil {
			return nil, err
		}
		r.groups[c.group] = true
	}
	return r, nil
}

// Name implements hooks.Hook.
func (r *Resctrl) Name() string { return Name }

// group returns the adjustment that puts the container in its class's group; nil for classes without one.
func (r *Resctrl) group(pod *hooks.PodInfo, ctr *hooks.ContainerInfo) *hooks.Adjustment {
	group := GroupOf(qos.Class(pod, ctr))
	if !r.groups[group] {
		return nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{RDTClass: hooks.String(group)}}
}

// PreCreateContainer puts the container in its class's group.
func (r *Resctrl) PreCreateContainer(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return r.group(pod, ctr), nil
}

// PreUpdateContainerResources puts a container created before its class's group existed in the group.
func (r *Resctrl) PreUpdateContainerResources(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return r.group(pod, ctr), nil
}
