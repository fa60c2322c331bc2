package proxy

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// What CRI cannot carry of a container's resources, the unified cgroup files on cgroup v1 (runc refuses
// them) and the RDT class (CRI has no field for it), the proxy has frontend.Writer apply once the
// container runs. This file keeps them out of what the runtime is sent and in what the store records.

// unsentFiles takes out of r what the runtime would refuse, the unified files on cgroup v1, and returns
// them for the proxy to write. Nil when the runtime takes everything.
func (s *Server) unsentFiles(r *runtimeapi.LinuxContainerResources) map[string]string {
	if s.writer.UnifiedToRuntime() || len(r.GetUnified()) == 0 {
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

// update sends the runtime a container's new resources (req, with the hooks' adjustment a applied), records
// them, and applies what the runtime cannot carry. pod is nil when the store does not know it: the update
// is then forwarded and recorded only.
func (s *Server) update(ctx context.Context, pod *store.Pod, c *store.Container, req *runtimeapi.UpdateContainerResourcesRequest,
	a *hooks.ResourceAdjustment, opts []grpc.CallOption) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	// A created container has no cgroup yet: what the runtime cannot carry waits for the start.
	running := pod != nil && c.State == store.ContainerRunning
	var before map[string]string
	if running && a != nil && s.writer.BeforeUpdate(ctx, pod, c.ID, a.Unified) {
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
		s.writer.ContainerFiles(ctx, pod, c.ID, notWritten(unsent, before), applied.RDTClass)
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
