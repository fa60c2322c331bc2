// Package batchresource is the built-in hook that turns the batch resources of BE pods
// (kubernetes.io/batch-cpu, kubernetes.io/batch-memory) into cgroup settings: kubelet does not know these
// extended resources, so without this hook a BE pod would run with the runtime's defaults.
//
// The resources come from Koordinator's node.koordinator.sh/extended-resource-spec annotation when the pod
// has it, else from a BatchLookup (the pod spec, read through the API server), else nowhere: the pod is
// then plain BE.
//
// While BE is suppressed by CFS quota on cgroup v1, the kernel refuses (EINVAL) a BE container or pod
// quota above the BE parent's, so runc could not create a BE container whose batch-cpu limit is above
// the clamp. Deps.QuotaCeiling (the suppress loop's) gives the clamp; quotas are capped there, and
// PreUpdateContainerResources recomputes them from the batch-cpu limit on every refresh, so a container
// gets its whole limit back once the clamp widens or lifts.
package batchresource

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/batch"
	"github.com/tandemkit/tandem/resource/cgroup"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// Name is the hook's name in logs, metrics and conflict messages.
const Name = "batchresource"

// Config configures the hook.
type Config struct {
	// CFSQuota enables the CFS quota from batch-cpu limits; off leaves BE pods unthrottled by quota.
	CFSQuota bool `json:"enableCFSQuota"`
}

// DefaultConfig enables every translation.
func DefaultConfig() Config { return Config{CFSQuota: true} }

// BatchLookup finds a pod's batch resources outside the CRI request; podspec.Source reads the pod spec.
// ok is false when it does not know them.
type BatchLookup interface {
	BatchResources(ctx context.Context, pod *hooks.PodInfo) (map[string]batch.Container, bool, error)
}

// Deps are the hook's collaborators; both are optional.
type Deps struct {
	// Lookup finds batch resources in the pod spec; nil leaves the annotation the only source.
	Lookup BatchLookup
	// QuotaCeiling is the most CFS bandwidth a BE cgroup may have now (suppress.Loop.QuotaCeiling); ok
	// false, or a nil func, is no ceiling.
	QuotaCeiling func() (cgroup.CPUMax, bool)
}

// BatchResource is the hook.
type BatchResource struct {
	cfg  Config
	deps Deps
}

var (
	_ hooks.PreRunPodSandboxHook            = (*BatchResource)(nil)
	_ hooks.PreCreateContainerHook          = (*BatchResource)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*BatchResource)(nil)
)

// New returns the hook.
func New(cfg Config, deps Deps) (*BatchResource, error) {
	if deps.QuotaCeiling == nil {
		deps.QuotaCeiling = func() (cgroup.CPUMax, bool) { return cgroup.CPUMax{}, false }
	}
	return &BatchResource{cfg: cfg, deps: deps}, nil
}

// quota is the CFS quota for a batch-cpu limit at period, capped at the ceiling in force; -1 without a
// limit, which the kernel lets inherit the parent's.
func (b *BatchResource) quota(limitMilli, period int64) int64 {
	q := batch.CFSQuota(limitMilli, period)
	if c, ok := b.deps.QuotaCeiling(); ok && q > 0 && (cgroup.CPUMax{Quota: q, Period: period}).Above(c) {
		return c.Under(period)
	}
	return q
}

// Name implements hooks.Hook.
func (b *BatchResource) Name() string { return Name }

// spec finds a BE pod's batch resources: the annotation first, since it is what Koordinator's webhook
// wrote and costs no lookup, then the lookup.
func (b *BatchResource) spec(ctx context.Context, pod *hooks.PodInfo) (map[string]batch.Container, bool, error) {
	if qos.Class(pod, nil) != resqos.BE {
		return nil, false, nil
	}
	if raw, ok := pod.Annotations[batch.AnnotationExtendedResourceSpec]; ok {
		cs, err := batch.ParseSpec(raw)
		if err != nil {
			return nil, false, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		return cs, true, nil
	}
	if b.deps.Lookup == nil {
		return nil, false, nil
	}
	cs, ok, err := b.deps.Lookup.BatchResources(ctx, pod)
	if err != nil {
		return nil, false, fmt.Errorf("pod %s/%s: batch resources from the pod spec: %w", pod.Namespace, pod.Name, err)
	}
	klog.FromContext(ctx).V(4).Info("Batch resources from the pod spec", "pod", klog.KRef(pod.Namespace, pod.Name), "found", ok)
	return cs, ok, nil
}

// PreRunPodSandbox sets the pod cgroup to the sums of the containers' batch resources.
func (b *BatchResource) PreRunPodSandbox(ctx context.Context, pod *hooks.PodInfo) (*hooks.Adjustment, error) {
	cs, ok, err := b.spec(ctx, pod)
	if !ok || err != nil {
		return nil, err
	}
	sum := batch.Sum(cs)
	r := &hooks.ResourceAdjustment{CPUShares: hooks.Int64(batch.CPUShares(sum.CPURequestMilli))}
	if b.cfg.CFSQuota {
		r.CPUQuota = hooks.Int64(b.quota(sum.CPULimitMilli, batch.DefaultPeriod))
	}
	mem := int64(-1) // unlimited on cgroup v1; the v2 writer turns it into "max"
	if sum.MemoryLimit > 0 {
		mem = sum.MemoryLimit
	}
	r.MemoryLimitInBytes = &mem
	return &hooks.Adjustment{PodResources: r}, nil
}

// PreCreateContainer sets the container's shares, quota and memory limit from its batch resources.
func (b *BatchResource) PreCreateContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	cs, ok, err := b.spec(ctx, pod)
	if !ok || err != nil {
		return nil, err
	}
	return b.container(cs, ctr), nil
}

// PreUpdateContainerResources keeps the batch settings whatever an update says (kubelet knows nothing of
// batch resources), and is how a refresh moves the quotas with the ceiling: the container's from its
// batch-cpu limit, and the pod's from the sum. The proxy writes the pod cgroup before the container when
// the pod's quota rises, after it when it falls, as cgroup v1 requires.
func (b *BatchResource) PreUpdateContainerResources(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	cs, ok, err := b.spec(ctx, pod)
	if !ok || err != nil {
		return nil, err
	}
	adj := b.container(cs, ctr)
	if adj != nil && b.cfg.CFSQuota {
		adj.PodResources = &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(b.quota(batch.Sum(cs).CPULimitMilli, batch.DefaultPeriod))}
	}
	return adj, nil
}

// container is the adjustment of one container from the pod's batch resources; nil when the spec does
// not name it.
func (b *BatchResource) container(cs map[string]batch.Container, ctr *hooks.ContainerInfo) *hooks.Adjustment {
	c, ok := cs[ctr.Name]
	if !ok {
		return nil
	}
	r := &hooks.ResourceAdjustment{CPUShares: hooks.Int64(batch.CPUShares(c.CPURequestMilli))}
	if b.cfg.CFSQuota {
		period := int64(batch.DefaultPeriod)
		if ctr.Resources != nil && ctr.Resources.CPUPeriod > 0 {
			period = ctr.Resources.CPUPeriod
		} else {
			r.CPUPeriod = hooks.Int64(period)
		}
		r.CPUQuota = hooks.Int64(b.quota(c.CPULimitMilli, period))
	}
	if c.MemoryLimit > 0 {
		r.MemoryLimitInBytes = hooks.Int64(c.MemoryLimit)
	}
	return &hooks.Adjustment{Resources: r}
}
