package proxy

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/proxy/store"
)

// refreshLoop re-applies policy to live containers whenever a policy says its decisions moved.
func (s *Server) refreshLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.refresh:
		}
		// Requests that arrive while a refresh runs collapse into one more, as the channel holds one.
		s.refreshAll(ctx)
	}
}

// refreshAll runs PreUpdateContainerResources for every created or running container and sends the
// runtime an update for those whose resources the hooks now decide differently.
func (s *Server) refreshAll(ctx context.Context) {
	logger := klog.FromContext(ctx)
	start := time.Now()
	updated := 0
	for _, c := range s.store.Snapshot().Containers {
		if c.State != runtimeapi.ContainerState_CONTAINER_RUNNING.String() && c.State != runtimeapi.ContainerState_CONTAINER_CREATED.String() {
			continue
		}
		pod, ok := s.store.Pod(c.PodSandboxID)
		if !ok {
			continue
		}
		if s.refreshOne(ctx, pod, c) {
			updated++
		}
	}
	if updated > 0 {
		logger.V(2).Info("Containers moved to their policies' new decisions", "updated", updated, "took", time.Since(start))
	}
}

func (s *Server) refreshOne(ctx context.Context, pod *store.Pod, c *store.Container) bool {
	defer s.lockContainer(c.ID)()
	// Re-read under the lock: a start or update may have changed the container since the snapshot.
	c, ok := s.store.Container(c.ID)
	if !ok {
		return false
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, pod.Name), "container", c.Name, "containerID", c.ID)
	ctx = klog.NewContext(ctx, logger)
	adj, err := s.runHooks(ctx, hooks.PreUpdateContainerResources, podInfo(pod), storedContainerInfo(c))
	if err != nil || adj == nil || adj.Resources == nil {
		return false
	}
	r := &runtimeapi.LinuxContainerResources{}
	applyResourcesFrom(r, c.Resources)
	applyResources(r, adj.Resources)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.RuntimeTimeout)
	defer cancel()
	if _, err := s.rt.UpdateContainerResources(cctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: c.ID, Linux: r}); err != nil {
		// The container may have exited meanwhile; the next refresh or its removal settles it.
		s.metrics.refreshed.WithLabelValues("error").Inc()
		logger.V(2).Info("Container not moved", "err", err)
		return false
	}
	applied := resourcesFromCRI(r)
	s.store.UpdateContainer(c.ID, func(c *store.Container) { c.Resources = applied })
	s.persist(ctx)
	s.metrics.refreshed.WithLabelValues("ok").Inc()
	logger.V(4).Info("Container moved", "cpusetCpus", applied.CpusetCpus)
	return true
}
