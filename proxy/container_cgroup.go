package proxy

import (
	"context"
	"errors"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/store"
)

// What the runtime cannot carry of a container's resources, the proxy applies itself: the unified cgroup
// files on cgroup v1, where runc refuses them, and the RDT class, which CRI has no field for. Policies
// return both in their Adjustment like any other field; this file is where they reach the node.

// ContainerCgroup names a container's cgroup as containerd creates it, relative to the hierarchy.
func ContainerCgroup(podCgroupParent, id string) string {
	return cgroup.ContainerPaths(podCgroupParent, id)[0]
}

// RDT moves a container's tasks into a resctrl group; resource/resctrl's FS with the cgroup's thread list
// is one (see internal/agent).
type RDT interface {
	// Assign moves the tasks of the container whose cgroup is ctrCgroup (relative to the hierarchy) into
	// group.
	Assign(ctx context.Context, group, ctrCgroup string) error
}

// unsentFiles takes out of r what the runtime would refuse, the unified files on cgroup v1, and returns
// them for the proxy to write. Nil when the runtime takes everything.
func (s *Server) unsentFiles(r *runtimeapi.LinuxContainerResources) map[string]string {
	if s.cgroups == nil || s.cgroups.Version() != 1 || len(r.GetUnified()) == 0 {
		return nil
	}
	files := r.Unified
	r.Unified = nil
	return files
}

// recorded is what the store keeps of a container's resources: what the runtime was sent, the files the
// proxy writes instead, and the RDT class.
func recorded(sent *runtimeapi.LinuxContainerResources, unsent map[string]string, rdtClass string) *hooks.Resources {
	r := resourcesFromCRI(sent)
	if len(unsent) == 0 && rdtClass == "" {
		return r
	}
	if r == nil {
		r = &hooks.Resources{}
	}
	r.Unified = mergeMap(r.Unified, unsent)
	r.RDTClass = rdtClass
	return r
}

// v1Files returns a container's unified files where the proxy writes them itself (cgroup v1), else nil.
func (s *Server) v1Files(r *hooks.Resources) map[string]string {
	if r == nil || s.cgroups == nil || s.cgroups.Version() != 1 {
		return nil
	}
	return r.Unified
}

// update sends the runtime a container's new resources (req, with the hooks' adjustment a applied), records
// them, and applies what the runtime cannot carry. pod is nil when the store does not know it: the update
// is then forwarded and recorded only.
func (s *Server) update(ctx context.Context, pod *store.Pod, c *store.Container, req *runtimeapi.UpdateContainerResourcesRequest,
	a *hooks.ResourceAdjustment, opts []grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	// A created container has no cgroup yet: what the runtime cannot carry waits for the start.
	running := pod != nil && c.State == store.ContainerRunning
	var before map[string]string
	if running && a != nil && s.writeBeforeUpdate(ctx, pod, c.ID, a.Unified) {
		before = a.Unified
	}
	unsent := s.unsentFiles(req.GetLinux())
	resp, err := s.rt.UpdateContainerResources(ctx, req, opts...)
	if err != nil {
		return nil, err
	}
	if req.GetLinux() == nil {
		return resp, nil
	}
	applied := recorded(req.GetLinux(), unsent, hooks.RDTClass(c.Resources, a))
	s.store.UpdateContainer(c.ID, func(sc *store.Container) { sc.Resources = applied })
	if running && applied != nil {
		s.applyUnsent(ctx, pod, c.ID, notWritten(unsent, before), applied.RDTClass)
	}
	return resp, nil
}

// notWritten returns the files of unsent that written does not hold with the same value: on cgroup v1, what
// is still to write after the update once the files written before it succeeded.
func notWritten(unsent, written map[string]string) map[string]string {
	var out map[string]string
	for k, v := range unsent {
		if w, ok := written[k]; !ok || w != v {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// applyUnsent writes a started container's cgroup files that the runtime could not take (files nil on
// cgroup v2) and moves its tasks into its RDT class. The runtime has acted, so failures are logged and
// counted, not returned.
func (s *Server) applyUnsent(ctx context.Context, pod *store.Pod, ctrID string, files map[string]string, rdtClass string) {
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
		if err := s.cgroups.Write(dir, cgroup.Settings{Files: files}); err != nil {
			s.metrics.ctrCgroupErrors.Inc()
			logger.Error(err, "Container cgroup files not written", "cgroup", dir, "files", files)
		} else {
			logger.V(4).Info("Container cgroup files written", "cgroup", dir, "files", files)
		}
	}
	if rdtClass == "" {
		return
	}
	if s.rdt == nil {
		logger.Info("Container not moved to its RDT class: resctrl is not available to tandem-proxy", "rdtClass", rdtClass)
		return
	}
	if err := s.rdt.Assign(ctx, rdtClass, dir); err != nil {
		s.metrics.ctrCgroupErrors.Inc()
		logger.Error(err, "Container not moved to its RDT class", "rdtClass", rdtClass, "cgroup", dir)
	}
}

// writeBeforeUpdate writes the cgroup files a hook set for a running container before the update goes to
// the runtime: the kernel checks some files against others (a CFS quota below the current burst is
// refused), so a lowered burst must be in place before the runtime lowers the quota. A raised one may
// fail here and is written again after the update (by the runtime on cgroup v2, by applyUnsent on v1). It
// reports whether every file was written, so that v1 does not write them all a second time.
func (s *Server) writeBeforeUpdate(ctx context.Context, pod *store.Pod, ctrID string, files map[string]string) bool {
	if s.cgroups == nil || len(files) == 0 || pod.CgroupParent == "" {
		return false
	}
	dir := ContainerCgroup(pod.CgroupParent, ctrID)
	err := s.cgroups.Write(dir, cgroup.Settings{Files: files})
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		klog.FromContext(ctx).V(2).Info("Container cgroup files not written before the update; written after it", "cgroup", dir, "err", err)
	}
	return err == nil
}
