package proxy

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
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

// Refresh runs PreUpdateContainerResources for every created or running container, sends the runtime
// what the hooks decide now, and returns when that is done. It is the synchronous form of Deps.Refresh:
// the suppress loop calls it when it stops, after lifting a suppression, so BE containers are widened
// before tandem-proxy exits. It needs the runtime connection only, not Serve: call it before Close.
// Safe for concurrent use with Serve and its refresh loop (each container is moved under its own lock).
func (s *Server) Refresh(ctx context.Context) error {
	if failed := s.refreshAll(ctx); failed > 0 {
		return fmt.Errorf("%d containers not moved to their policies' decisions (the runtime refused or did not answer; see the log at V(2))", failed)
	}
	return ctx.Err()
}

// refreshAll runs PreUpdateContainerResources for every created or running container and sends the
// runtime the resources the hooks decide now. It returns how many updates failed.
func (s *Server) refreshAll(ctx context.Context) int {
	logger := klog.FromContext(ctx)
	start := time.Now()
	updated, failed := 0, 0
	for _, c := range s.store.Snapshot().Containers {
		if ctx.Err() != nil {
			break
		}
		if !c.State.Live() {
			continue
		}
		pod, ok := s.store.Pod(c.PodSandboxID)
		if !ok {
			continue
		}
		switch s.refreshOne(ctx, pod, c) {
		case refreshed:
			updated++
		case refreshFailed:
			failed++
		}
	}
	if updated > 0 || failed > 0 {
		logger.V(2).Info("Containers moved to their policies' new decisions", "updated", updated, "failed", failed, "took", time.Since(start))
	}
	return failed
}

type refreshResult int

const (
	refreshSkipped refreshResult = iota
	refreshed
	refreshFailed
)

func (s *Server) refreshOne(ctx context.Context, pod *store.Pod, c *store.Container) refreshResult {
	defer s.ctrLocks.Lock(c.ID)()
	// Re-read under the lock: a start or update may have changed the container since the snapshot.
	c, ok := s.store.Container(c.ID)
	if !ok {
		return refreshSkipped
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, pod.Name), "container", c.Name, "containerID", c.ID)
	ctx = klog.NewContext(ctx, logger)
	adj, err := s.runHooks(ctx, hooks.PreUpdateContainerResources, pod.HookInfo(), c.HookInfo())
	if err != nil || adj == nil {
		return refreshSkipped
	}
	// cgroup v1 refuses a container quota above its pod's: a pod quota that rises goes first, one that
	// falls after the container's.
	podFirst := hooks.QuotaRises(pod.Resources, adj.PodResources)
	if podFirst {
		s.writer.PodResources(ctx, pod, adj)
	}
	result := refreshSkipped
	if adj.Resources != nil {
		result = s.updateFromRefresh(ctx, pod, c, adj.Resources)
	}
	if !podFirst {
		s.writer.PodResources(ctx, pod, adj)
	}
	return result
}

// updateFromRefresh sends the runtime the container's resources with a refresh's adjustment applied.
func (s *Server) updateFromRefresh(ctx context.Context, pod *store.Pod, c *store.Container, adj *hooks.ResourceAdjustment) refreshResult {
	logger := klog.FromContext(ctx)
	r := adjusted(c.Resources, adj)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.RuntimeTimeout)
	defer cancel()
	if _, err := s.update(cctx, pod, c, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: c.ID, Linux: r}, adj, nil); err != nil {
		// The container may have exited meanwhile; the next refresh or its removal settles it.
		s.metrics.refreshed.WithLabelValues("error").Inc()
		logger.V(2).Info("Container not moved", "err", err)
		return refreshFailed
	}
	s.persist(ctx)
	s.metrics.refreshed.WithLabelValues("ok").Inc()
	logger.V(4).Info("Container moved", "cpusetCpus", r.GetCpusetCpus(), "cpuQuota", r.GetCpuQuota())
	return refreshed
}
