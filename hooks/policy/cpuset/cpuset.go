// Package cpuset is the built-in hook that pins containers to CPU pools by QoS class, with the layout
// Koordinator users expect to find on their nodes: LSE containers get CPUs of their own; LSR containers get CPUs no LS/LSR container shares (BE
// may); LS containers share what is left; BE containers run everywhere but on LSE CPUs. Exclusive CPUs
// come from resource/cpuset's allocator; when they change, the hook asks for running LS and BE containers
// to be moved to the new pools.
package cpuset

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "cpuset"

// AnnotationResourceSpec is Koordinator's per-pod resource spec; Tandem reads its preferredCPUBindPolicy.
const AnnotationResourceSpec = "scheduling.koordinator.sh/resource-spec"

// Recorded is an exclusive allocation that a container held before a restart, read from the proxy's
// store (the runtime's cpuset and the class the qos hook recorded).
type Recorded struct {
	PodUID, Container, ContainerID string
	Class                          resqos.Class
	CPUs                           string
}

// CPUSet is the hook. It keeps no state of its own: the allocations, and which container uses each,
// live in the allocator, which outlives the hooks tandem-proxy rebuilds at every configuration change.
type CPUSet struct {
	alloc *alloc.Allocator
	// poolsChanged is told whenever exclusive CPUs were taken or given back.
	poolsChanged func()
}

var (
	_ hooks.PreCreateContainerHook          = (*CPUSet)(nil)
	_ hooks.PreStartContainerHook           = (*CPUSet)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*CPUSet)(nil)
	_ hooks.PostRemoveContainerHook         = (*CPUSet)(nil)
	_ hooks.RollbackHook                    = (*CPUSet)(nil)
)

// New returns the hook; a nil allocator (no CPU topology) is hooks.ErrSkip. poolsChanged may be nil.
func New(a *alloc.Allocator, poolsChanged func()) (*CPUSet, error) {
	if a == nil {
		return nil, fmt.Errorf("no CPU topology: %w", hooks.ErrSkip)
	}
	if poolsChanged == nil {
		poolsChanged = func() {}
	}
	return &CPUSet{alloc: a, poolsChanged: poolsChanged}, nil
}

// Restore re-registers the allocations that running containers held before tandem-proxy restarted and
// binds each to its container, so a restart hands out exactly the same CPUs and never the same CPU
// twice. tandem-proxy calls it once, after it rebuilt its store from the runtime and before it serves a
// call. Restoring later, at some hook's first call, would read a later store that can still list a
// container whose removal is under way and bring its just-released allocation back for good. It
// returns how many allocations it restored; each one refused is logged.
func Restore(ctx context.Context, a *alloc.Allocator, recorded []Recorded) int {
	logger := klog.FromContext(ctx)
	n := 0
	for _, r := range recorded {
		if err := restore(a, r); err != nil {
			logger.Error(err, "Exclusive CPUs not restored; the container keeps its cpuset but the CPUs may be handed out again",
				"owner", Owner(r.PodUID, r.Container), "containerID", r.ContainerID)
			continue
		}
		n++
	}
	return n
}

func restore(a *alloc.Allocator, r Recorded) error {
	set, err := topology.ParseCPUList(r.CPUs)
	if err != nil {
		return fmt.Errorf("cpuset %q: %w: %w", r.CPUs, err, errdefs.ErrInvalidArgument)
	}
	o := Owner(r.PodUID, r.Container)
	if err := a.Restore(o, r.Class, set); err != nil {
		return err
	}
	a.Bind(o, r.ContainerID)
	return nil
}

// Name implements hooks.Hook.
func (c *CPUSet) Name() string { return Name }

// Owner names the allocation of a container: its pod and its name, so a restarted container keeps the
// CPUs of the one it replaces.
func Owner(podUID, container string) string { return podUID + "/" + container }

func owner(pod *hooks.PodInfo, ctr *hooks.ContainerInfo) string {
	uid := pod.UID
	if uid == "" {
		uid = pod.ID
	}
	return Owner(uid, ctr.Name)
}

// BindPolicy reads the pod's preferred bind policy; malformed JSON is InvalidArgument.
func BindPolicy(pod *hooks.PodInfo) (alloc.BindPolicy, error) {
	raw, ok := pod.Annotations[AnnotationResourceSpec]
	if !ok {
		return alloc.ParseBindPolicy("")
	}
	var spec struct {
		PreferredCPUBindPolicy string `json:"preferredCPUBindPolicy"`
	}
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return "", fmt.Errorf("annotation %s: %w: %w", AnnotationResourceSpec, err, errdefs.ErrInvalidArgument)
	}
	p, err := alloc.ParseBindPolicy(spec.PreferredCPUBindPolicy)
	if err != nil {
		return "", fmt.Errorf("annotation %s: %w", AnnotationResourceSpec, err)
	}
	return p, nil
}

// cpus decides the container's cpuset. Exclusive classes allocate (idempotently) when allocate is set.
func (c *CPUSet) cpus(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo, allocate bool) (*hooks.Adjustment, error) {
	class := qos.Class(pod, ctr)
	var set string
	switch {
	case class == resqos.LSR && qos.KubeletOwned(ctr):
		c.recordKubelet(ctx, pod, ctr)
		return nil, nil
	case class == resqos.LSE || class == resqos.LSR:
		o := owner(pod, ctr)
		if a, ok := c.alloc.Get(o); ok {
			set = a.CPUs.String()
			break
		}
		if !allocate {
			klog.FromContext(ctx).V(2).Info("Exclusive container without an allocation; cpuset left as it is", "owner", o)
			return nil, nil
		}
		res := ctr.Resources
		if res == nil {
			res = &hooks.Resources{}
		}
		n, err := resqos.ExclusiveCPUs(res.CPUQuota, res.CPUPeriod, res.CPUShares)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s container %s: %s %w", pod.Namespace, pod.Name, ctr.Name, class, err)
		}
		policy, err := BindPolicy(pod)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		got, err := c.alloc.Allocate(o, class, n, policy)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s container %s: %s: %w", pod.Namespace, pod.Name, ctr.Name, class, err)
		}
		set = got.String()
		klog.FromContext(ctx).V(2).Info("Exclusive CPUs allocated", "owner", o, "class", class, "cpus", set, "bindPolicy", policy)
		c.poolsChanged()
	case class == resqos.LS:
		set = c.alloc.Pools().LS.String()
	case class == resqos.BE:
		set = c.alloc.Pools().BE.String()
	default:
		// SYSTEM pods, and pods whose class is unknown, keep what kubelet gave them.
		return nil, nil
	}
	return &hooks.Adjustment{Resources: &hooks.ResourceAdjustment{CpusetCpus: hooks.String(set)}}, nil
}

// recordKubelet records the CPUs kubelet's static CPU manager gave a Guaranteed container as that
// container's LSR allocation, so the LS pool leaves them out and LSE/LSR allocations do not take them,
// and never changes them: the cpuset stays what kubelet sent, at creation and at every update (kubelet
// re-sends it from its reconcile loop). A kubelet that did not send the cpuset yet is recorded at the
// update that carries it.
func (c *CPUSet) recordKubelet(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) {
	logger := klog.FromContext(ctx)
	if ctr.Resources == nil || ctr.Resources.CpusetCpus == "" {
		return
	}
	set, err := topology.ParseCPUList(ctr.Resources.CpusetCpus)
	if err != nil {
		logger.Error(err, "Cpuset from kubelet's static CPU manager not understood; left as kubelet sent it", "pod", klog.KRef(pod.Namespace, pod.Name), "container", ctr.Name)
		return
	}
	o := owner(pod, ctr)
	if a, ok := c.alloc.Get(o); ok && a.CPUs.Equals(set) {
		if ctr.ID != "" {
			c.alloc.Bind(o, ctr.ID)
		}
		return
	} else if ok {
		c.alloc.Release(o)
	}
	if err := c.alloc.Restore(o, resqos.LSR, set); err != nil {
		// Kubelet does not know Tandem's LSE/LSR allocations: an overlap means both handed out a CPU.
		// Kubelet's choice stands; the operator must keep the two apart (docs/policies.md).
		logger.Error(err, "CPUs kubelet's static CPU manager gave a Guaranteed container overlap Tandem's exclusive CPUs; the container keeps kubelet's cpuset. Label exclusive pods LSE/LSR or use the static policy, not both on the same CPUs",
			"pod", klog.KRef(pod.Namespace, pod.Name), "container", ctr.Name, "cpus", set.String())
		c.poolsChanged()
		return
	}
	if ctr.ID != "" {
		c.alloc.Bind(o, ctr.ID)
	}
	logger.V(2).Info("CPUs of kubelet's static CPU manager recorded as LSR", "owner", o, "cpus", set.String())
	c.poolsChanged()
}

// PreCreateContainer allocates exclusive CPUs or assigns the class's pool.
func (c *CPUSet) PreCreateContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return c.cpus(ctx, pod, ctr, true)
}

// PreStartContainer binds the allocation to the container about to run, and catches pool changes since
// the container was created.
func (c *CPUSet) PreStartContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	adj, err := c.cpus(ctx, pod, ctr, false)
	if err != nil || ctr.ID == "" {
		return adj, err
	}
	c.alloc.Bind(owner(pod, ctr), ctr.ID)
	return adj, nil
}

// PreUpdateContainerResources keeps the cpuset Tandem decided, whatever kubelet's update says, and is how
// running LS and BE containers move when the pools change.
func (c *CPUSet) PreUpdateContainerResources(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return c.cpus(ctx, pod, ctr, false)
}

// PostRemoveContainer gives the CPUs back when the container using them is gone.
func (c *CPUSet) PostRemoveContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) error {
	o := owner(pod, ctr)
	// A restart may have taken the CPUs over; the old container's removal then keeps them.
	if c.alloc.ReleaseFor(o, ctr.ID) {
		klog.FromContext(ctx).V(2).Info("Exclusive CPUs released", "owner", o, "containerID", ctr.ID)
		c.poolsChanged()
	}
	return nil
}

// Rollback gives back an allocation made for a container the runtime then refused, unless a running
// container already uses it.
func (c *CPUSet) Rollback(ctx context.Context, stage hooks.Stage, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) {
	if stage != hooks.PreCreateContainer {
		return
	}
	o := owner(pod, ctr)
	if c.alloc.ReleaseUnbound(o) {
		klog.FromContext(ctx).V(2).Info("Exclusive CPUs rolled back", "owner", o)
		c.poolsChanged()
	}
}
