package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// Recover loads the checkpoint and reconciles it with the runtime. A corrupt checkpoint is set aside and
// the store rebuilt from the runtime alone. An unreachable runtime is not fatal: the proxy serves with the
// checkpoint (calls fail with Unavailable meanwhile) and reconciles as soon as the runtime answers.
func (s *Server) Recover(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	snap, err := s.checkpoint.Load()
	switch {
	case errors.Is(err, store.ErrCorrupt):
		aside, aerr := s.checkpoint.SetAside(time.Now())
		if aerr != nil {
			return fmt.Errorf("%w; remove %s by hand", aerr, s.checkpoint.Path())
		}
		logger.Error(err, "Checkpoint corrupt; set aside, rebuilding the store from the runtime", "setAside", aside)
		snap = &store.Snapshot{}
	case err != nil:
		return fmt.Errorf("%w; check the permissions of --state-dir", err)
	}
	s.store.Load(snap)
	logger.Info("Loaded checkpoint", "path", s.checkpoint.Path(), "pods", len(snap.Pods), "containers", len(snap.Containers))
	if err := s.reconcile(ctx); err != nil {
		if !s.logListFailure(logger, err) {
			logger.Error(err, "Runtime not reachable; serving with the checkpoint until it answers")
		}
	}
	return nil
}

// logListFailure logs a reconcile that failed for another reason than an unreachable runtime, and
// reports whether it did. A listing larger than gRPC's message limit is the common one: pods whose labels
// and annotations grew too large (a few MB each) make containerd's ListPodSandbox answer exceed 16 MiB,
// which fails kubelet's own listing too; saying "not reachable" there sends the operator to the wrong
// place.
func (s *Server) logListFailure(logger klog.Logger, err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	case codes.ResourceExhausted:
		// grpc-go says "received" when the proxy's own receive limit refused the answer and "trying to
		// send" when the runtime's send limit did.
		limit := "the runtime's send limit (containerd's is 16 MiB, as is kubelet's receive limit)"
		if strings.Contains(status.Convert(err).Message(), "received message larger than max") {
			limit = "tandem-proxy's max-msg-size"
		}
		logger.Error(err, "Runtime's answer exceeds the gRPC message limit (ResourceExhausted); the store is not reconciled",
			"limit", limit, "maxMsgSize", s.cfg.MaxMsgSize,
			"hint", "pods or containers with large labels or annotations are the usual cause; docs/operations.md#limits says how to find them")
	default:
		logger.Error(err, "Runtime refused to list its pods and containers; the store is not reconciled")
	}
	return true
}

// reconcile makes the store agree with the runtime and releases containers that are gone.
func (s *Server) reconcile(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RuntimeTimeout)
	defer cancel()
	since := s.store.Generation()
	listed, err := s.listRuntime(ctx)
	if err != nil {
		s.metrics.reconciles.WithLabelValues("error").Inc()
		return fmt.Errorf("list the runtime's pods and containers: %w", err)
	}
	res := s.store.Reconcile(since, listed)
	releasedPods := map[string]*store.Pod{}
	for _, p := range res.ReleasedPods {
		releasedPods[p.ID] = p
	}
	for _, c := range res.ReleasedContainers {
		logger.Info("Released container the runtime no longer has", "containerID", c.ID, "container", c.Name, "podSandboxID", c.PodSandboxID)
		pod, ok := s.store.Pod(c.PodSandboxID)
		if !ok {
			pod = orStub(releasedPods[c.PodSandboxID], c.PodSandboxID)
		}
		s.postHooks(ctx, hooks.PostRemoveContainer, pod, c)
	}
	for _, p := range res.ReleasedPods {
		logger.Info("Released pod sandbox the runtime no longer has", "pod", klog.KRef(p.Namespace, p.Name), "podSandboxID", p.ID)
	}
	s.metrics.released.Add(float64(len(res.ReleasedContainers)))
	s.metrics.reconciles.WithLabelValues("ok").Inc()
	changed := res.AdoptedPods+res.AdoptedContainers+len(res.ReleasedPods)+len(res.ReleasedContainers) > 0
	if changed {
		s.persist(ctx)
	}
	logger.V(2).Info("Reconciled store with the runtime", "pods", len(listed.Pods), "containers", len(listed.Containers),
		"adoptedPods", res.AdoptedPods, "adoptedContainers", res.AdoptedContainers,
		"releasedPods", len(res.ReleasedPods), "releasedContainers", len(res.ReleasedContainers))
	return nil
}

// listRuntime reads the runtime's pods and containers. List answers carry identity and state; the
// per-item status calls, which carry the cgroup parent and resources, are made only for items the
// store does not know yet, so a periodic resync costs two calls on a quiet node.
func (s *Server) listRuntime(ctx context.Context) (*store.Snapshot, error) {
	pods, err := s.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, err
	}
	ctrs, err := s.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, err
	}
	snap := &store.Snapshot{}
	for _, p := range pods.GetItems() {
		md := p.GetMetadata()
		pod := &store.Pod{
			ID: p.GetId(), Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid(), Attempt: md.GetAttempt(),
			State: store.PodState(p.GetState().String()), RuntimeHandler: p.GetRuntimeHandler(),
			Labels: p.GetLabels(), Annotations: p.GetAnnotations(), CreatedAt: p.GetCreatedAt(),
		}
		if old, ok := s.store.Pod(pod.ID); ok && old.CgroupParent != "" {
			pod.CgroupParent = old.CgroupParent
		} else {
			pod.CgroupParent = s.podCgroupParent(ctx, pod.ID)
		}
		snap.Pods = append(snap.Pods, pod)
	}
	for _, c := range ctrs.GetContainers() {
		ctr := &store.Container{
			ID: c.GetId(), PodSandboxID: c.GetPodSandboxId(), Name: c.GetMetadata().GetName(), Attempt: c.GetMetadata().GetAttempt(),
			State: store.ContainerState(c.GetState().String()), Image: c.GetImage().GetImage(),
			Labels: c.GetLabels(), Annotations: c.GetAnnotations(), CreatedAt: c.GetCreatedAt(),
		}
		if _, ok := s.store.Container(ctr.ID); !ok {
			ctr.Resources = s.containerResources(ctx, ctr.ID)
		}
		snap.Containers = append(snap.Containers, ctr)
	}
	return snap, nil
}

// podCgroupParent reads the cgroup parent from the runtime's verbose sandbox status. containerd puts the
// original PodSandboxConfig, JSON encoded with the CRI field names, under info["info"].config.
func (s *Server) podCgroupParent(ctx context.Context, id string) string {
	st, err := s.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Pod sandbox status unavailable; cgroup parent unknown", "podSandboxID", id, "err", err)
		return ""
	}
	var info struct {
		Config *runtimeapi.PodSandboxConfig `json:"config"`
	}
	if raw, ok := st.GetInfo()["info"]; ok && json.Unmarshal([]byte(raw), &info) == nil {
		return info.Config.GetLinux().GetCgroupParent()
	}
	return ""
}

// containerResources reads what the runtime applied: the status' resources where the runtime reports
// them (containerd 1.7+), else the resources of the creation config from the verbose info.
func (s *Server) containerResources(ctx context.Context, id string) *hooks.Resources {
	st, err := s.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Container status unavailable; resources unknown", "containerID", id, "err", err)
		return nil
	}
	if r := st.GetStatus().GetResources().GetLinux(); r != nil {
		return resourcesFromCRI(r)
	}
	var info struct {
		Config *runtimeapi.ContainerConfig `json:"config"`
	}
	if raw, ok := st.GetInfo()["info"]; ok && json.Unmarshal([]byte(raw), &info) == nil {
		return resourcesFromCRI(info.Config.GetLinux().GetResources())
	}
	return nil
}

// resyncLoop reconciles periodically, and at once when the runtime comes back after being unreachable,
// so containers that died while the proxy was not looking release what they held.
func (s *Server) resyncLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(s.cfg.ResyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.reconcileNow:
		}
		if err := s.reconcile(ctx); err != nil && !s.logListFailure(logger, err) {
			logger.V(2).Info("Reconcile skipped; runtime not reachable", "err", err)
		}
	}
}

// watchRuntime asks for a reconcile whenever the runtime connection becomes ready again after a failure.
func (s *Server) watchRuntime(ctx context.Context) {
	logger := klog.FromContext(ctx)
	state := s.runtime.GetState()
	// lost is set once a ready connection went away; the next ready state means the runtime (or the
	// connection to it) restarted, and what it runs may have changed meanwhile.
	lost, logged := false, false
	for s.runtime.WaitForStateChange(ctx, state) {
		state = s.runtime.GetState()
		switch state {
		case connectivity.TransientFailure:
			lost = true
			if !logged {
				logger.Info("Container runtime unreachable; calls fail with Unavailable until it returns", "runtimeEndpoint", s.cfg.RuntimeEndpoint)
				logged = true
			}
		case connectivity.Idle, connectivity.Connecting:
			lost = true
		case connectivity.Ready:
			if lost {
				logger.Info("Container runtime connection re-established", "runtimeEndpoint", s.cfg.RuntimeEndpoint)
				select {
				case s.reconcileNow <- struct{}{}:
				default:
				}
			}
			lost, logged = false, false
		}
	}
}
