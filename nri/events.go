package nri

import (
	"context"
	"maps"
	"reflect"
	"time"

	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/nri/pkg/api"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// The stub finds the events the plugin handles by these interfaces, and subscribes to those alone.
var (
	_ interface {
		Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error)
	} = (*Plugin)(nil)
	_ interface {
		CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error)
	} = (*Plugin)(nil)
)

// Synchronize rebuilds the store from what containerd reports: at the first connection, after the
// plugin restarted, and after containerd did. Containers the store had and containerd no longer reports
// are released as if removed; the exclusive CPUs of those it reports are restored (Deps.Synchronized).
func (p *Plugin) Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "Synchronize")
	defer cancel()
	logger := klog.FromContext(ctx)
	seen := map[string]bool{}
	for _, sb := range pods {
		pod := podFromNRI(sb)
		// The labels and annotations PreRunPodSandbox hooks set live only in the store: compute them again.
		// The pod's cgroup settings are written again too; both are idempotent.
		if adj, err := p.runHooks(ctx, hooks.PreRunPodSandbox, sandboxInfo(sb), nil); err != nil {
			logger.Error(err, "Pod's sandbox hooks failed at synchronization; its labels and annotations are containerd's alone", "pod", klog.KRef(pod.Namespace, pod.Name))
		} else {
			recordSandbox(pod, adj)
			p.writer.PodResources(ctx, pod, adj)
		}
		p.store.PutPod(pod)
		seen[pod.ID] = true
	}
	for _, c := range ctrs {
		p.store.PutContainer(containerFromNRI(c))
		seen[c.GetId()] = true
	}
	old := p.store.Snapshot()
	for _, c := range old.Containers {
		if !seen[c.ID] {
			removed, _ := p.store.RemoveContainer(c.ID)
			p.specOnly.Delete(c.ID)
			p.postRemove(ctx, removed)
		}
	}
	for _, pod := range old.Pods {
		if !seen[pod.ID] {
			p.store.RemovePod(pod.ID)
		}
	}
	snap := p.store.Snapshot()
	if p.deps.Synchronized != nil {
		p.deps.Synchronized(ctx, snap)
	}
	p.synced.Store(true)
	p.metrics.observe("Synchronize", start, nil)
	logger.Info("Synchronized with containerd", "pods", len(snap.Pods), "containers", len(snap.Containers), "took", time.Since(start))
	// Running containers move to what the policies decide now, once containerd is done with us.
	p.requestRefresh()
	return nil, nil
}

// RunPodSandbox runs PreRunPodSandbox hooks. Their labels and annotations go to the store, their
// pod-level settings to the pod's cgroup; an error fails the sandbox.
func (p *Plugin) RunPodSandbox(ctx context.Context, sb *api.PodSandbox) (err error) {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "RunPodSandbox", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()))
	defer cancel()
	defer func() { p.metrics.observe("RunPodSandbox", start, err) }()
	info := sandboxInfo(sb)
	adj, err := p.runHooks(ctx, hooks.PreRunPodSandbox, info, nil)
	if err != nil {
		return errgrpc.ToGRPC(err)
	}
	pod := podFromNRI(sb)
	recordSandbox(pod, adj)
	p.store.PutPod(pod)
	p.writer.PodResources(ctx, pod, adj)
	klog.FromContext(ctx).V(2).Info("Pod sandbox started", "podSandboxID", pod.ID)
	if adj != nil && adj.CgroupParent != nil {
		klog.FromContext(ctx).Info("A hook asked for another cgroup parent, which NRI cannot give a sandbox; ignored (it needs tandem-proxy as a CRI proxy)",
			"cgroupParent", *adj.CgroupParent)
	}
	return nil
}

// recordSandbox keeps the labels and annotations the sandbox hooks set on the stored pod.
func recordSandbox(pod *store.Pod, adj *hooks.Adjustment) {
	if adj == nil {
		return
	}
	pod.Labels = mergeMap(pod.Labels, adj.Labels)
	pod.Annotations = mergeMap(pod.Annotations, adj.Annotations)
}

// StopPodSandbox marks the pod and its containers stopped and runs PostStopPodSandbox hooks.
func (p *Plugin) StopPodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "StopPodSandbox", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()))
	defer cancel()
	id := sb.GetId()
	p.store.UpdatePod(id, func(pod *store.Pod) { pod.State = store.PodNotReady })
	p.store.UpdatePodContainers(id, func(c *store.Container) { c.State = store.ContainerExited })
	if pod, ok := p.store.Pod(id); ok {
		_, _ = p.runHooks(ctx, hooks.PostStopPodSandbox, pod.HookInfo(), nil)
	}
	klog.FromContext(ctx).V(2).Info("Pod sandbox stopped", "podSandboxID", id)
	p.metrics.observe("StopPodSandbox", start, nil)
	return nil
}

// RemovePodSandbox forgets the pod and releases what its containers held.
func (p *Plugin) RemovePodSandbox(ctx context.Context, sb *api.PodSandbox) error {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "RemovePodSandbox", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()))
	defer cancel()
	pod, removed := p.store.RemovePod(sb.GetId())
	if pod == nil {
		pod = podFromNRI(sb)
	}
	for _, c := range removed {
		p.ctrLocks.Forget(c.ID)
		_, _ = p.runHooks(ctx, hooks.PostRemoveContainer, pod.HookInfo(), c.HookInfo())
	}
	p.metrics.observe("RemovePodSandbox", start, nil)
	klog.FromContext(ctx).V(2).Info("Pod sandbox removed", "podSandboxID", sb.GetId(), "releasedContainers", len(removed))
	return nil
}

// podFor returns the stored pod, which carries what the sandbox hooks set, or the one NRI reports when
// the store missed it.
func (p *Plugin) podFor(sb *api.PodSandbox) *store.Pod {
	if pod, ok := p.store.Pod(sb.GetId()); ok {
		return pod
	}
	pod := podFromNRI(sb)
	p.store.PutPod(pod)
	return pod
}

// CreateContainer runs PreCreateContainer hooks and answers with their adjustment; an error refuses the
// container, and what the hooks reserved for it goes back.
func (p *Plugin) CreateContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container) (_ *api.ContainerAdjustment, _ []*api.ContainerUpdate, err error) {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "CreateContainer", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "container", c.GetName(), "containerID", c.GetId())
	defer cancel()
	defer func() { p.metrics.observe("CreateContainer", start, err) }()
	defer p.ctrLocks.Lock(c.GetId())()
	pod := p.podFor(sb)
	pi, ci := pod.HookInfo(), containerInfo(c)
	adj, err := p.runHooks(ctx, hooks.PreCreateContainer, pi, ci)
	if err != nil {
		// The code (InvalidArgument, ResourceExhausted...) reaches kubelet through containerd, as through
		// tandem-proxy.
		return nil, nil, errgrpc.ToGRPC(err)
	}
	if adj != nil && adj.Resources != nil && adj.Resources.OomScoreAdj != nil {
		p.clampOOMScore(ctx, adj.Resources, c)
	}
	unified := p.writer.UnifiedToRuntime()
	out, labels := containerAdjustment(adj, unified)
	if len(labels) > 0 {
		klog.FromContext(ctx).V(2).Info("Container labels from hooks kept by Tandem only: NRI cannot label a container", "labels", labels)
	}
	ctr := containerFromNRI(c)
	if adj != nil {
		ctr.Annotations = mergeMap(ctr.Annotations, adj.Annotations)
		ctr.Labels = mergeMap(ctr.Labels, adj.Labels)
		ctr.Resources = hooks.ApplyResources(ctr.Resources, adj.Resources)
	}
	ctr.State = store.ContainerCreated
	p.store.PutContainer(ctr)
	p.writer.PodResources(ctx, pod, adj)
	klog.FromContext(ctx).V(2).Info("Container adjusted", "resources", ctr.Resources)
	return out, nil, nil
}

// clampOOMScore keeps a hook's oom_score_adj where containerd lets runc set it (see oom.go).
func (p *Plugin) clampOOMScore(ctx context.Context, r *hooks.ResourceAdjustment, c *api.Container) {
	var spec *int64
	if o := c.GetLinux().GetOomScoreAdj(); o != nil {
		v := o.GetValue()
		spec = &v
	}
	want := *r.OomScoreAdj
	got, ok := oomScore(want, p.runtimeOOM.Load(), spec)
	if !ok {
		klog.FromContext(ctx).V(2).Info("oom_score_adj left as containerd set it: neither containerd's own nor the spec's is known", "wanted", want)
		r.OomScoreAdj = nil
		return
	}
	if got != want {
		klog.FromContext(ctx).V(2).Info("oom_score_adj raised to the lowest containerd allows", "wanted", want, "set", got)
	}
	r.OomScoreAdj = &got
}

// StartContainer runs PreStartContainer hooks (the cpuset policy binds its CPUs to the container here).
// NRI takes no adjustment at start: a change they decide reaches containerd from the refresh loop.
func (p *Plugin) StartContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container) error {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "StartContainer", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "container", c.GetName(), "containerID", c.GetId())
	defer cancel()
	defer p.ctrLocks.Lock(c.GetId())()
	pod := p.podFor(sb)
	stored, ok := p.store.Container(c.GetId())
	if !ok {
		stored = containerFromNRI(c)
		p.store.PutContainer(stored)
	}
	adj, err := p.runHooks(ctx, hooks.PreStartContainer, pod.HookInfo(), stored.HookInfo())
	p.metrics.observe("StartContainer", start, err)
	if err != nil {
		// containerd fails the start, as tandem-proxy fails StartContainer.
		return errgrpc.ToGRPC(err)
	}
	if adj != nil && adj.Resources != nil && changes(stored.Resources, adj.Resources) {
		// NRI takes no adjustment here, and the task is made already: sent once the container runs.
		p.specOnly.Store(c.GetId(), struct{}{})
	}
	p.writer.PodResources(ctx, pod, adj)
	klog.FromContext(ctx).V(2).Info("Container starting")
	return nil
}

// PostStartContainer writes what the runtime could not take (unified files on cgroup v1, the RDT class)
// and runs PostStartContainer hooks.
func (p *Plugin) PostStartContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container) error {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "PostStartContainer", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "container", c.GetName(), "containerID", c.GetId())
	defer cancel()
	defer p.ctrLocks.Lock(c.GetId())()
	pod := p.podFor(sb)
	p.store.UpdateContainer(c.GetId(), func(sc *store.Container) { sc.State = store.ContainerRunning })
	stored, ok := p.store.Container(c.GetId())
	if !ok {
		stored = containerFromNRI(c)
		p.store.PutContainer(stored)
	}
	p.writer.ContainerResources(ctx, pod, stored.ID, stored.Resources)
	_, _ = p.runHooks(ctx, hooks.PostStartContainer, pod.HookInfo(), stored.HookInfo())
	// The task may run less than the store holds or the hooks decided (an update sent while it
	// started, a CPU bound at PreStartContainer): the refresh loop sends it all now that containerd
	// applies updates to the task. Pod-level settings need no such pass: the plugin writes them itself.
	if _, ok := p.specOnly.Load(c.GetId()); ok {
		p.requestRefresh()
	}
	p.metrics.observe("PostStartContainer", start, nil)
	return nil
}

// UpdateContainer runs PreUpdateContainerResources hooks on kubelet's update and answers with what they
// change in it: kubelet's own fields stay unless a hook changes them (in-place resize needs them).
func (p *Plugin) UpdateContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container, r *api.LinuxResources) (_ []*api.ContainerUpdate, err error) {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "UpdateContainer", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "container", c.GetName(), "containerID", c.GetId())
	defer cancel()
	defer func() { p.metrics.observe("UpdateContainer", start, err) }()
	defer p.ctrLocks.Lock(c.GetId())()
	pod := p.podFor(sb)
	stored, ok := p.store.Container(c.GetId())
	if !ok {
		stored = containerFromNRI(c)
	}
	ci := stored.HookInfo()
	requested := resourcesFromNRI(r)
	ci.Resources = requested
	adj, err := p.runHooks(ctx, hooks.PreUpdateContainerResources, pod.HookInfo(), ci)
	if err != nil {
		return nil, errgrpc.ToGRPC(err)
	}
	var a *hooks.ResourceAdjustment
	if adj != nil {
		a = adj.Resources
	}
	applied := hooks.ApplyResources(requested, a)
	applied.RDTClass = hooks.RDTClass(stored.Resources, a)
	if !p.writer.UnifiedToRuntime() {
		// On cgroup v1 the files are the plugin's to write, after the update (PostUpdateContainer).
		applied.Unified = mergeMap(maps.Clone(unifiedOf(stored.Resources)), applied.Unified)
	}
	stored.Resources = applied
	p.store.PutContainer(stored)
	p.writer.PodResources(ctx, pod, adj)
	if u := containerUpdate(c.GetId(), a, p.writer.UnifiedToRuntime()); u != nil {
		return []*api.ContainerUpdate{u}, nil
	}
	return nil, nil
}

// PostUpdateContainer writes what the runtime could not take of an update.
func (p *Plugin) PostUpdateContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container) error {
	ctx, cancel := p.eventContext(ctx, "PostUpdateContainer", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "container", c.GetName(), "containerID", c.GetId())
	defer cancel()
	defer p.ctrLocks.Lock(c.GetId())()
	if stored, ok := p.store.Container(c.GetId()); ok && stored.State == store.ContainerRunning {
		p.writer.ContainerResources(ctx, p.podFor(sb), stored.ID, stored.Resources)
	}
	return nil
}

// StopContainer marks the container stopped and runs PostStopContainer hooks.
func (p *Plugin) StopContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "StopContainer", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "container", c.GetName(), "containerID", c.GetId())
	defer cancel()
	p.store.UpdateContainer(c.GetId(), func(sc *store.Container) { sc.State = store.ContainerExited })
	if stored, ok := p.store.Container(c.GetId()); ok {
		_, _ = p.runHooks(ctx, hooks.PostStopContainer, p.podFor(sb).HookInfo(), stored.HookInfo())
	}
	p.metrics.observe("StopContainer", start, nil)
	klog.FromContext(ctx).V(2).Info("Container stopped")
	return nil, nil
}

// RemoveContainer forgets the container and releases what it held. containerd also sends it when a
// container it created with our adjustment then failed to be created, so a refused container leaks nothing.
func (p *Plugin) RemoveContainer(ctx context.Context, sb *api.PodSandbox, c *api.Container) error {
	start := time.Now()
	ctx, cancel := p.eventContext(ctx, "RemoveContainer", "pod", klog.KRef(sb.GetNamespace(), sb.GetName()), "container", c.GetName(), "containerID", c.GetId())
	defer cancel()
	removed, ok := p.store.RemoveContainer(c.GetId())
	if !ok {
		removed = containerFromNRI(c)
	}
	p.ctrLocks.Forget(c.GetId())
	p.specOnly.Delete(c.GetId())
	pod := p.podFor(sb)
	_, _ = p.runHooks(ctx, hooks.PostRemoveContainer, pod.HookInfo(), removed.HookInfo())
	p.metrics.observe("RemoveContainer", start, nil)
	klog.FromContext(ctx).V(2).Info("Container removed")
	return nil
}

// postRemove runs PostRemoveContainer for a container found gone at synchronization.
func (p *Plugin) postRemove(ctx context.Context, c *store.Container) {
	if c == nil {
		return
	}
	p.ctrLocks.Forget(c.ID)
	pod, ok := p.store.Pod(c.PodSandboxID)
	if !ok {
		pod = &store.Pod{ID: c.PodSandboxID}
	}
	_, _ = p.runHooks(ctx, hooks.PostRemoveContainer, pod.HookInfo(), c.HookInfo())
}

func mergeMap(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[string]string, len(src))
	}
	maps.Copy(dst, src)
	return dst
}

// changes reports whether the adjustment changes the recorded resources.
func changes(r *hooks.Resources, a *hooks.ResourceAdjustment) bool {
	if a == nil {
		return false
	}
	cur := r.Clone()
	if cur == nil {
		cur = &hooks.Resources{}
	}
	return !reflect.DeepEqual(hooks.ApplyResources(cur, a), cur)
}

// unifiedOf returns r's unified files; nil for nil.
func unifiedOf(r *hooks.Resources) map[string]string {
	if r == nil {
		return nil
	}
	return r.Unified
}
