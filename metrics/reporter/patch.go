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

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reclaim"
)

// StatusPatch is the strategic merge patch of the Node's status subresource that sets (present) or
// removes the batch resources and, when m is not nil, sets the node-metric annotation too. One
// request carries both because the API server keeps the metadata of a status update (only the
// spec is reset) and NodeRestriction leaves a node's annotations alone: a write of the Node costs
// every watcher of Nodes one event, not two.
func StatusPatch(present bool, batch reclaim.Resources, m *nodemetric.NodeMetric) ([]byte, error) {
	return statusPatch(present, batch, m, nil)
}

// CapacityAnnotation is the Node annotation that says, in words, which term of the formula decides
// each batch resource now (or why there is no figure), so that `kubectl describe node` answers "why
// is batch-cpu what it is"; `tandemctl capacity` on the node gives every term.
const CapacityAnnotation = "tandem.io/batch-capacity"

// CapacityNote is CapacityAnnotation's value.
type CapacityNote struct {
	// CPU and Memory say which term decides, with its amount ("high-priority pods' predicted
	// peak 1.40 cores"); CPUTerm and MemoryTerm name it as the metrics do.
	CPU        string       `json:"cpu,omitempty"`
	Memory     string       `json:"memory,omitempty"`
	CPUTerm    reclaim.Term `json:"cpuTerm,omitempty"`
	MemoryTerm reclaim.Term `json:"memoryTerm,omitempty"`
	// Note says why there are no terms (colocation off, stale samples).
	Note string `json:"note,omitempty"`
	// Window is where the node stands against its batch windows; nil without batch-window-config.
	Window *batchwindow.State `json:"window,omitempty"`
	// Clock says the node's clock is far from the API server's (see ClockTolerance).
	Clock string `json:"clock,omitempty"`
}

// TermBatchWindow names a batch window as the term that decides a resource: outside its windows (or in
// the closing lead) a node publishes outsideCapacityPercent of what the formula gives.
const TermBatchWindow reclaim.Term = "batchWindow"

// windowText says how the window bounds an amount the formula computed, in the unit format gives.
func windowText(st batchwindow.State, computed string) string {
	what := "closed"
	if st.Phase == batchwindow.PhaseClosing {
		what = "closing at " + st.Next.Format(time.RFC3339)
	} else if st.Window == "" {
		what = "not open (no window within a week)"
	}
	name := st.Window
	if name == "" {
		name = "batch-window-config"
	}
	return fmt.Sprintf("batch window %q %s: %d%% of the computed %s", name, what, st.OutsidePercent, computed)
}

// noteFor is the annotation for want: the deciding terms when computed, else why not.
func noteFor(want desired) *CapacityNote {
	var note *CapacityNote
	switch res := want.terms; {
	case res != nil:
		c, m := res.CPUBound(), res.MemoryBound()
		note = &CapacityNote{CPU: c.CPUText(), Memory: m.MemoryText(), CPUTerm: c.Term, MemoryTerm: m.Term}
		if want.window.Phase.Limits() {
			note.CPU, note.CPUTerm = windowText(want.window, fmt.Sprintf("%.2f cores (%s)", float64(res.Batch.CPUMilli)/1000, note.CPU)), TermBatchWindow
			note.Memory, note.MemoryTerm = windowText(want.window, fmt.Sprintf("%s (%s)", bytesText(res.Batch.MemoryBytes), note.Memory)), TermBatchWindow
		}
	case want.why != "":
		note = &CapacityNote{Note: want.why}
	}
	if want.window.Phase != batchwindow.PhaseNone || want.clock != "" {
		if note == nil {
			note = &CapacityNote{}
		}
		if want.window.Phase != batchwindow.PhaseNone {
			w := want.window
			note.Window = &w
		}
		note.Clock = want.clock
	}
	return note
}

// bytesText is an amount of memory as the notes write it.
func bytesText(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

func statusPatch(present bool, batch reclaim.Resources, m *nodemetric.NodeMetric, note *CapacityNote) ([]byte, error) {
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
	annotations := map[string]string{}
	if m != nil {
		value, err := nodemetric.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("node-metric annotation: %w", err)
		}
		annotations[nodemetric.AnnotationKey] = value
	}
	if note != nil {
		value, err := json.Marshal(note)
		if err != nil {
			return nil, fmt.Errorf("%s annotation: %w", CapacityAnnotation, err)
		}
		annotations[CapacityAnnotation] = string(value)
	}
	if len(annotations) > 0 {
		patch["metadata"] = map[string]any{"annotations": annotations}
	}
	return json.Marshal(patch)
}

// patch writes want, with the annotation m unless it is nil, in one request.
func (r *Reporter) patch(ctx context.Context, want desired, m *nodemetric.NodeMetric) error {
	// The note rides on every write and causes none: it changes when the figures do.
	body, err := statusPatch(want.present, want.batch, m, noteFor(want))
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
