package reporter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
)

// StatusPatch is the strategic merge patch of the Node's status subresource that sets (present) or
// removes the batch resources and, when m is not nil, sets the node-metric annotation too. One
// request carries both because the API server keeps the metadata of a status update (only the
// spec is reset) and NodeRestriction leaves a node's annotations alone: a write of the Node costs
// every watcher of Nodes one event, not two.
func StatusPatch(present bool, batch reclaim.Resources, m *nodemetric.NodeMetric) ([]byte, error) {
	values := map[corev1.ResourceName]any{
		nodemetric.ResourceBatchCPU:    nil,
		nodemetric.ResourceBatchMemory: nil,
	}
	if present {
		// batch-cpu counts milli-cores as whole units, as Koordinator publishes it.
		values[nodemetric.ResourceBatchCPU] = resource.NewQuantity(batch.CPUMilli, resource.DecimalSI).String()
		values[nodemetric.ResourceBatchMemory] = resource.NewQuantity(batch.MemoryBytes, resource.BinarySI).String()
	}
	patch := map[string]any{"status": map[string]any{"capacity": values, "allocatable": values}}
	if m != nil {
		value, err := nodemetric.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("node-metric annotation: %w", err)
		}
		patch["metadata"] = map[string]any{"annotations": map[string]string{nodemetric.AnnotationKey: value}}
	}
	return json.Marshal(patch)
}

// patch writes want, with the annotation m unless it is nil, in one request.
func (r *Reporter) patch(ctx context.Context, want desired, m *nodemetric.NodeMetric) error {
	body, err := StatusPatch(want.present, want.batch, m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	node, err := r.deps.Client.PatchNode(ctx, r.cfg.NodeName, types.StrategicMergePatchType, body, "status")
	if err != nil {
		return err
	}
	r.learn(node)
	klog.FromContext(ctx).V(2).Info("Published batch capacity", "present", want.present,
		"batchCPUMilli", want.batch.CPUMilli, "batchMemoryBytes", want.batch.MemoryBytes, "nodeMetric", m != nil)
	return nil
}

func (r *Reporter) succeeded(now time.Time) {
	r.failures = 0
	r.nextRetry = time.Time{}
	r.backoff = r.newBackoff()
	r.metrics.patches.WithLabelValues(resultSuccess).Inc()
	r.metrics.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
}

// failed counts the error and schedules the retry. Every request is idempotent (it carries the
// whole desired value, not a change), so a retry after a conflict or a timeout is always right.
func (r *Reporter) failed(ctx context.Context, now time.Time, what string, err error, patch bool) {
	if ctx.Err() != nil {
		return // shutting down: not the API server's fault
	}
	if patch {
		result := resultError
		if apierrors.IsConflict(err) {
			result = resultConflict
		}
		r.metrics.patches.WithLabelValues(result).Inc()
	}
	delay := r.backoff.Step()
	r.failures++
	r.nextRetry = now.Add(delay)
	klog.FromContext(ctx).Error(err, "Node reporter request failed; retrying", "request", what, "retryIn", delay, "failures", r.failures)
}

// newBackoff starts the retry delays over; only the cap, never Steps, ends the doubling.
func (r *Reporter) newBackoff() wait.Backoff {
	return wait.Backoff{Duration: min(r.cfg.BackoffInitial, r.cfg.BackoffMax), Factor: 2,
		Jitter: max(r.cfg.BackoffJitter, 0), Steps: math.MaxInt, Cap: r.cfg.BackoffMax}
}
