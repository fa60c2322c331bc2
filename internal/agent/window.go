package agent

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/config/slo"
)

// windows holds the node's batch windows (batch-window-config) for the reporter, which withdraws batch
// capacity outside them, and for the eviction loop, which takes batch pods off once one has closed.
type windows struct {
	mu       sync.Mutex
	settings batchwindow.Settings
	sch      atomic.Pointer[batchwindow.Schedule]
}

// State is where the node stands at now; no configuration means no windows.
func (w *windows) State(now time.Time) batchwindow.State {
	if s := w.sch.Load(); s != nil {
		return s.State(now)
	}
	return batchwindow.State{}
}

// set builds the schedule for s unless it is the one in force: a new schedule starts with an empty
// cache, and reloads of other sections must not cost a walk.
func (w *windows) set(ctx context.Context, s batchwindow.Settings) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sch.Load() != nil && reflect.DeepEqual(s, w.settings) {
		return nil
	}
	sch, err := batchwindow.New(s)
	if err != nil {
		return fmt.Errorf("batch-window-config: %w", err)
	}
	w.settings = s
	w.sch.Store(sch)
	st := sch.State(time.Now())
	klog.FromContext(ctx).Info("Batch windows", "enable", s.Enable, "windows", sch.Describe(), "phase", st.Phase, "next", st.Next,
		"outsideCapacityPercent", s.OutsideCapacityPercent, "stopPlacementBeforeCloseSeconds", s.StopPlacementBeforeCloseSeconds,
		"evictionGraceSeconds", s.EvictionGraceSeconds)
	return nil
}

// batchWindows is the batch-window eviction loop; the reporter reads n.windows.
func (n *nodeParts) batchWindows(ctx context.Context) (component, error) {
	initial := *n.st.colocation.Load()
	if err := n.windows.set(ctx, initial.BatchWindows); err != nil {
		// Validated before it got here; a default schedule keeps the loop able to take the next one.
		klog.FromContext(ctx).Error(err, "Batch windows off until a valid batch-window-config")
		if err := n.windows.set(ctx, batchwindow.Defaults()); err != nil {
			return nil, err
		}
	}
	cfg := evict.DefaultWindowConfig()
	cfg.DryRun = initial.DryRun.WindowEvict
	l, err := evict.NewWindowLoop(cfg, evict.WindowDeps{
		Latest: n.col.Latest, Pods: podMeta(n.fe.Store()), State: n.windows.State, Evictor: n.evictor, Dry: n.dry, Registerer: n.reg,
		Allowance: func() (int64, bool) {
			if r := n.reporter.Load(); r != nil {
				if b := r.CapacityStatus().Batch; b != nil {
					return b.CPUMilli, true
				}
			}
			return 0, false
		},
	})
	if err != nil {
		return nil, fmt.Errorf("batch-window eviction: %w", err)
	}
	dry := newDryRunSwitch(ctx, dryrun.WindowEvict, cfg.DryRun)
	return &loop{name: "batch-windows", run: l.Run, configure: func(ctx context.Context, r slo.Resolved) error {
		c := evict.DefaultWindowConfig()
		c.DryRun = r.DryRun.WindowEvict
		if err := l.Reconfigure(c); err != nil {
			return err
		}
		dry.set(ctx, c.DryRun)
		return n.windows.set(ctx, r.BatchWindows)
	}}, nil
}
