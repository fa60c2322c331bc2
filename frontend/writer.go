package frontend

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/store"
)

// Writer applies what a policy decided and the runtime cannot carry: pod-level cgroup settings, which
// neither CRI nor NRI reaches; a container's unified cgroup files on cgroup v1, where runc refuses them;
// and its RDT class, which neither protocol has a field for. Policies return all three in their
// Adjustment like any other field; this is where they reach the node. The runtime has acted (or will act)
// whatever happens here, so failures are logged and counted, never returned.
type Writer struct {
	// Cgroups writes the files; nil leaves pod-level settings unapplied, with a log line, and sends the
	// runtime every unified file.
	Cgroups cgroup.Writer
	// RDT moves containers into their class; nil leaves them, with a log line.
	RDT RDT
	// Store records the pod-level settings written, where later stages and the node loops read them.
	Store *store.Store
	// PodErrors and ContainerErrors count the pod and container settings not applied; they may be the
	// same counter.
	PodErrors, ContainerErrors prometheus.Counter
}

// ContainerCgroup names a container's cgroup as containerd creates it, relative to the hierarchy.
func ContainerCgroup(podCgroupParent, id string) string {
	return cgroup.ContainerPaths(podCgroupParent, id)[0]
}

// UnifiedToRuntime reports whether the runtime may be sent unified cgroup files: runc refuses them on
// cgroup v1, where the Writer writes them itself once the container runs.
func (w *Writer) UnifiedToRuntime() bool {
	return w.Cgroups == nil || w.Cgroups.Version() != 1
}

// v1Files returns a container's unified files where the Writer writes them itself (cgroup v1), else nil.
func (w *Writer) v1Files(r *hooks.Resources) map[string]string {
	if r == nil || w.UnifiedToRuntime() {
		return nil
	}
	return r.Unified
}

// PodResources writes an adjustment's pod-level settings to the pod's cgroup and records them in the
// store.
func (w *Writer) PodResources(ctx context.Context, pod *store.Pod, a *hooks.Adjustment) {
	if a == nil || a.PodResources == nil {
		return
	}
	logger := klog.FromContext(ctx)
	switch {
	case w.Cgroups == nil:
		logger.Info("Pod-level settings not applied: no cgroup hierarchy found at start", "podResources", a.PodResources)
		return
	case pod.CgroupParent == "":
		logger.Info("Pod-level settings not applied: the pod has no cgroup parent", "podResources", a.PodResources)
		return
	}
	if err := w.Cgroups.Write(pod.CgroupParent, a.PodResources.CgroupSettings()); err != nil {
		w.PodErrors.Inc()
		logger.Error(err, "Pod-level settings not applied", "cgroupParent", pod.CgroupParent)
		return
	}
	w.Store.UpdatePod(pod.ID, func(sp *store.Pod) { sp.Resources = hooks.ApplyResources(sp.Resources, a.PodResources) })
	logger.V(4).Info("Pod cgroup updated", "cgroupParent", pod.CgroupParent, "podResources", a.PodResources)
}

// ContainerResources applies what the runtime could not take of a running container's resources r (nil
// for none): its unified files on cgroup v1 and its RDT class. A front end calls it once the container
// has started, and again whenever the runtime was sent new resources for it.
func (w *Writer) ContainerResources(ctx context.Context, pod *store.Pod, ctrID string, r *hooks.Resources) {
	if r == nil {
		return
	}
	w.ContainerFiles(ctx, pod, ctrID, w.v1Files(r), r.RDTClass)
}

// ContainerFiles writes a running container's cgroup files the runtime could not take (none on cgroup
// v2) and moves its tasks into its RDT class.
func (w *Writer) ContainerFiles(ctx context.Context, pod *store.Pod, ctrID string, files map[string]string, rdtClass string) {
	if len(files) == 0 && rdtClass == "" {
		return
	}
	logger := klog.FromContext(ctx)
	if pod.CgroupParent == "" {
		logger.Info("Container settings not applied: the pod has no cgroup parent", "files", files, "rdtClass", rdtClass)
		return
	}
	dir := ContainerCgroup(pod.CgroupParent, ctrID)
	if len(files) > 0 {
		if err := w.Cgroups.Write(dir, cgroup.Settings{Files: files}); err != nil {
			w.ContainerErrors.Inc()
			logger.Error(err, "Container cgroup files not written", "cgroup", dir, "files", files)
		} else {
			logger.V(4).Info("Container cgroup files written", "cgroup", dir, "files", files)
		}
	}
	if rdtClass == "" {
		return
	}
	if w.RDT == nil {
		logger.Info("Container not moved to its RDT class: resctrl is not available to Tandem", "rdtClass", rdtClass)
		return
	}
	if err := w.RDT.Assign(ctx, rdtClass, dir); err != nil {
		w.ContainerErrors.Inc()
		logger.Error(err, "Container not moved to its RDT class", "rdtClass", rdtClass, "cgroup", dir)
	}
}

// BeforeUpdate writes the cgroup files a hook set for a running container before the update goes to the
// runtime: the kernel checks some files against others (a CFS quota below the current burst is refused),
// so a lowered burst must be in place before the runtime lowers the quota. A raised one may fail here and
// is written again after the update (by the runtime on cgroup v2, by ContainerFiles on v1). It reports whether
// every file was written, so that v1 does not write them all a second time.
func (w *Writer) BeforeUpdate(ctx context.Context, pod *store.Pod, ctrID string, files map[string]string) bool {
	if w.Cgroups == nil || len(files) == 0 || pod.CgroupParent == "" {
		return false
	}
	dir := ContainerCgroup(pod.CgroupParent, ctrID)
	err := w.Cgroups.Write(dir, cgroup.Settings{Files: files})
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		klog.FromContext(ctx).V(2).Info("Container cgroup files not written before the update; written after it", "cgroup", dir, "err", err)
	}
	return err == nil
}
