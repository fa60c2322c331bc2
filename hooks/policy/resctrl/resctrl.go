// Package resctrl is the built-in hook for RDT (seed 004's resource-qos-config resctrlQOS): it gives
// each QoS class a resctrl control group (LSR, LS, BE) with its share of the L3 cache ways and of the
// memory bandwidth, and moves every started container's tasks into its class's group, so batch work
// cannot evict the cache lines latency-sensitive work depends on.
//
// Tasks exist only once a container runs, so the move happens at PostStartContainer, with the task IDs
// from a PIDLister the proxy provides. A task started by the container afterwards inherits the group
// from its parent; PreUpdateContainerResources moves the container's tasks again, which repairs a task
// forked between the start and the move.
package resctrl

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/cgroup"
	rdt "github.com/tandemkit/tandem/resource/resctrl"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "resctrl"

// PIDLister lists a running container's tasks (thread IDs). The runtime knows them; CgroupTasks reads
// them from the container's cgroup.
type PIDLister interface {
	PIDs(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) ([]int, error)
}

// Deps are the hook's dependencies.
type Deps struct {
	// Root is the resctrl mount; empty means /sys/fs/resctrl.
	Root string
	PIDs PIDLister
}

// Resctrl is the hook.
type Resctrl struct {
	fs     *rdt.FS
	groups map[string]bool // the groups of enabled classes
	pids   PIDLister
}

var (
	_ hooks.PostStartContainerHook          = (*Resctrl)(nil)
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
	if d.PIDs == nil {
		return nil, fmt.Errorf("no way to list a container's tasks: %w", hooks.ErrSkip)
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
	r := &Resctrl{fs: fs, groups: map[string]bool{}, pids: d.PIDs}
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

func (r *Resctrl) assign(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) error {
	group := GroupOf(qos.Class(pod, ctr))
	if !r.groups[group] {
		return nil
	}
	pids, err := r.pids.PIDs(ctx, pod, ctr)
	if err != nil {
		return fmt.Errorf("list tasks of container %s: %w", ctr.ID, err)
	}
	if err := r.fs.AddTasks(group, pids); err != nil {
		return err
	}
	klog.FromContext(ctx).V(4).Info("Container in resctrl group", "container", ctr.ID, "group", group, "tasks", len(pids))
	return nil
}

// PostStartContainer moves the container's tasks into its class's group.
func (r *Resctrl) PostStartContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) error {
	return r.assign(ctx, pod, ctr)
}

// PreUpdateContainerResources moves the container's tasks again, catching tasks forked before the move
// at start. It changes no resources, and a failure is logged, not returned: RDT must not hold up a
// resize.
func (r *Resctrl) PreUpdateContainerResources(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	if err := r.assign(ctx, pod, ctr); err != nil {
		klog.FromContext(ctx).Error(err, "Container not moved to its resctrl group", "container", ctr.ID)
	}
	return nil, nil
}

// CgroupTasks is a PIDLister that reads the container's cgroup: the cpu controller's tasks file on
// cgroup v1, cgroup.threads on v2. Both list threads, which is what resctrl assigns.
type CgroupTasks struct {
	// Root is the cgroup mount (/sys/fs/cgroup).
	Root    string
	Version int
	// ContainerCgroup names the container's cgroup (cpuburst.ContainerdCgroup for containerd).
	ContainerCgroup func(pod *hooks.PodInfo, ctr *hooks.ContainerInfo) string
}

// PIDs implements PIDLister.
func (c CgroupTasks) PIDs(_ context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) ([]int, error) {
	dir := filepath.Join(c.Root, "cpu", c.ContainerCgroup(pod, ctr))
	if c.Version == 2 {
		dir = filepath.Join(c.Root, c.ContainerCgroup(pod, ctr))
	}
	return cgroup.Threads(dir)
}
