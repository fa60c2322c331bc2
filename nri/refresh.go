package nri

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// refreshLoop re-applies policy to live containers whenever a policy says its decisions moved
// (Deps.Refresh) or the plugin itself needs it (a pre-start change, a synchronization).
func (p *Plugin) refreshLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.deps.Refresh:
		case <-p.kick:
		}
		// Requests that arrive during a pass collapse into one more, as each channel holds one.
		_, _ = p.refreshAll(ctx)
	}
}

// Refresh runs PreUpdateContainerResources for every created or running container, sends containerd
// what the hooks decide now, and returns when that is done: the suppress loop calls it when it stops, to
// widen BE containers before Tandem exits.
func (p *Plugin) Refresh(ctx context.Context) error {
	failed, err := p.refreshAll(ctx)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d containers not moved to their policies' decisions (containerd refused; see the log at V(2))", failed)
	}
	return ctx.Err()
}

// pending is one container's refresh: the update for containerd and what to record once it is applied.
type pending struct {
	pod     *store.Pod
	ctr     *store.Container
	adj     *hooks.Adjustment
	update  *api.ContainerUpdate
	applied *hooks.Resources
	// running is whether the container ran when the update was planned: containerd writes an update
	// to a container that does not run into its spec alone.
	running bool
}

// refreshAll computes every live container's update, sends those that change something to containerd in
// one request, and records those containerd applied. It returns how many failed.
func (p *Plugin) refreshAll(ctx context.Context) (int, error) {
	start := time.Now()
	var todo []pending
	for _, c := range p.store.Snapshot().Containers {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if !c.State.Live() {
			continue
		}
		pod, ok := p.store.Pod(c.PodSandboxID)
		if !ok {
			continue
		}
		if pd, ok := p.plan(ctx, pod, c); ok {
			todo = append(todo, pd)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	ref := p.stub.Load()
	if ref == nil {
		return len(todo), fmt.Errorf("%d containers not moved: not connected to containerd's NRI: %w", len(todo), errdefs.ErrUnavailable)
	}
	var updates []*api.ContainerUpdate
	for _, pd := range todo {
		if hooks.QuotaRises(pd.pod.Resources, pd.adj.PodResources) {
			// cgroup v1 refuses a container quota above its pod's: a rising pod quota goes first.
			p.writer.PodResources(ctx, pd.pod, pd.adj)
		}
		if pd.update != nil {
			updates = append(updates, pd.update)
		}
	}
	failedUpdates, err := ref.UpdateContainers(updates)
	if err != nil {
		p.metrics.updates.WithLabelValues("error").Add(float64(len(updates)))
		return len(updates), fmt.Errorf("send %d container updates to containerd: %w", len(updates), err)
	}
	failed := map[string]bool{}
	for _, u := range failedUpdates {
		failed[u.GetContainerId()] = true
	}
	logger := klog.FromContext(ctx)
	for _, pd := range todo {
		if !hooks.QuotaRises(pd.pod.Resources, pd.adj.PodResources) {
			p.writer.PodResources(ctx, pd.pod, pd.adj)
		}
		if pd.update == nil {
			continue
		}
		if failed[pd.ctr.ID] {
			// The container may have exited meanwhile; the next refresh or its removal settles it.
			p.metrics.updates.WithLabelValues("error").Inc()
			logger.V(2).Info("Container not moved", "pod", klog.KRef(pd.pod.Namespace, pd.pod.Name), "container", pd.ctr.Name, "containerID", pd.ctr.ID)
			continue
		}
		p.metrics.updates.WithLabelValues("ok").Inc()
		p.record(ctx, pd)
	}
	logger.V(2).Info("Containers moved to their policies' new decisions", "updated", len(updates)-len(failed), "failed", len(failed), "took", time.Since(start))
	return len(failed), nil
}

// plan runs the hooks for one container under its lock and returns its update, if any.
func (p *Plugin) plan(ctx context.Context, pod *store.Pod, c *store.Container) (pending, bool) {
	defer p.ctrLocks.Lock(c.ID)()
	c, ok := p.store.Container(c.ID)
	if !ok {
		return pending{}, false
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, pod.Name), "container", c.Name, "containerID", c.ID)
	hctx, cancel := context.WithTimeout(klog.NewContext(ctx, logger), p.cfg.RequestTimeout)
	defer cancel()
	adj, err := p.runHooks(hctx, hooks.PreUpdateContainerResources, pod.HookInfo(), c.HookInfo())
	if err != nil {
		return pending{}, false
	}
	if adj == nil {
		adj = &hooks.Adjustment{}
	}
	pd := pending{pod: pod, ctr: c, adj: adj, running: c.State == store.ContainerRunning}
	want := adj.Resources
	if want != nil && !changes(c.Resources, want) {
		want = nil
	}
	if _, specOnly := p.specOnly.Load(c.ID); specOnly && pd.running && c.Resources != nil {
		// What the store holds never reached the task: all of it is sent.
		want = hooks.Whole(hooks.ApplyResources(c.Resources, want))
	}
	if want != nil {
		pd.applied = hooks.ApplyResources(c.Resources, want)
		pd.update = containerUpdate(c.ID, want, p.writer.UnifiedToRuntime())
		if pd.update == nil {
			// Only what the plugin writes itself changed (v1 files, the RDT class).
			p.recordLocked(ctx, pd)
		}
	}
	return pd, pd.update != nil || adj.PodResources != nil
}

// record stores a container's new resources and, if it runs, writes what containerd could not take.
func (p *Plugin) record(ctx context.Context, pd pending) {
	defer p.ctrLocks.Lock(pd.ctr.ID)()
	p.recordLocked(ctx, pd)
}

// recordLocked is record for a caller that holds the container's lock.
func (p *Plugin) recordLocked(ctx context.Context, pd pending) {
	var running bool
	p.store.UpdateContainer(pd.ctr.ID, func(sc *store.Container) {
		sc.Resources = pd.applied
		running = sc.State == store.ContainerRunning
	})
	switch {
	case pd.update != nil && !pd.running:
		// In the spec only, which a starting container may have made its task from already: sent again
		// once it runs, by PostStartContainer's request or, if that has passed meanwhile, by this one.
		p.specOnly.Store(pd.ctr.ID, struct{}{})
		if running {
			p.requestRefresh()
		}
	case pd.running:
		p.specOnly.Delete(pd.ctr.ID)
	}
	if running {
		p.writer.ContainerResources(ctx, pd.pod, pd.ctr.ID, pd.applied)
	}
}
