package nri

import (
	"context"
	"reflect"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/store"
)

// What NRI cannot carry the plugin writes itself, as the proxy does: pod-level cgroup settings, unified
// files on cgroup v1, and the RDT class. containerd has acted (or will act) whatever happens here, so a
// failure is logged and counted, never returned.

// applyPodResources writes pod-level settings to the pod's cgroup and records them in the store.
func (p *Plugin) applyPodResources(ctx context.Context, pod *store.Pod, a *hooks.Adjustment) {
	if a == nil || a.PodResources == nil {
		return
	}
	logger := klog.FromContext(ctx)
	switch {
	case p.deps.Cgroups == nil:
		logger.Info("Pod-level settings not applied: no cgroup hierarchy found at start", "podResources", a.PodResources)
		return
	case pod.CgroupParent == "":
		logger.Info("Pod-level settings not applied: the pod has no cgroup parent", "podResources", a.PodResources)
		return
	}
	if err := p.deps.Cgroups.Write(pod.CgroupParent, a.PodResources.CgroupSettings()); err != nil {
		p.metrics.cgroupErrors.Inc()
		logger.Error(err, "Pod-level settings not applied", "cgroupParent", pod.CgroupParent)
		return
	}
	p.store.UpdatePod(pod.ID, func(sp *store.Pod) { sp.Resources = hooks.ApplyResources(sp.Resources, a.PodResources) })
	logger.V(4).Info("Pod cgroup updated", "cgroupParent", pod.CgroupParent, "podResources", a.PodResources)
}

// v1Files returns a container's unified files where the plugin writes them itself (cgroup v1), else nil.
func (p *Plugin) v1Files(r *hooks.Resources) map[string]string {
	if r == nil || p.unifiedToRuntime() {
		return nil
	}
	return r.Unified
}

// applyUnsent writes a running container's cgroup files the runtime could not take and moves its tasks
// into its RDT class.
func (p *Plugin) applyUnsent(ctx context.Context, pod *store.Pod, c *store.Container, files map[string]string) {
	var class string
	if c.Resources != nil {
		class = c.Resources.RDTClass
	}
	if len(files) == 0 && class == "" {
		return
	}
	logger := klog.FromContext(ctx)
	if pod.CgroupParent == "" {
		logger.Info("Container settings not applied: the pod has no cgroup parent", "files", files, "rdtClass", class)
		return
	}
	dir := cgroup.ContainerPaths(pod.CgroupParent, c.ID)[0]
	if len(files) > 0 {
		if err := p.deps.Cgroups.Write(dir, cgroup.Settings{Files: files}); err != nil {
			p.metrics.cgroupErrors.Inc()
			logger.Error(err, "Container cgroup files not written", "cgroup", dir, "files", files)
		} else {
			logger.V(4).Info("Container cgroup files written", "cgroup", dir, "files", files)
		}
	}
	if class == "" {
		return
	}
	if p.deps.RDT == nil {
		logger.Info("Container not moved to its RDT class: resctrl is not available to Tandem", "rdtClass", class)
		return
	}
	if err := p.deps.RDT.Assign(ctx, class, dir); err != nil {
		p.metrics.cgroupErrors.Inc()
		logger.Error(err, "Container not moved to its RDT class", "rdtClass", class, "cgroup", dir)
	}
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
