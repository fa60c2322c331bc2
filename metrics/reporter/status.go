package reporter

import (
	"time"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/reclaim"
)

// CapacityStatus is the batch capacity the reporter last computed, term by term, and what it last
// published: what /debug/capacity serves and `tandemctl capacity` shows, so that an operator can
// see why batch-cpu is what it is without reading code.
type CapacityStatus struct {
	Node string `json:"node"`
	// Time is when the reporter last stepped.
	Time time.Time `json:"time"`
	// Enabled is colocation-config's enable for this node.
	Enabled bool `json:"enabled"`
	// Computed says the terms below are this step's; Why says why not, or why they are not
	// published yet (warming up).
	Computed bool   `json:"computed"`
	Why      string `json:"why,omitempty"`
	// CPU is in milli-cores, Memory in bytes.
	CPU    *Terms `json:"cpu,omitempty"`
	Memory *Terms `json:"memory,omitempty"`
	// Published is what the last successful write put on the Node, at PublishedAt; nil before one.
	Published   *reclaim.Resources `json:"published,omitempty"`
	PublishedAt time.Time          `json:"publishedAt,omitzero"`
	// Settings are the knobs the formula read.
	Settings reclaim.Settings `json:"settings"`
	// Window is where the node stands against its batch windows; nil without batch-window-config.
	// While Window.Phase.Limits(), Batch below is outsidePercent of Computed.
	Window *batchwindow.State `json:"window,omitempty"`
	// Computed is what the formula gives before the window; Batch is what is published.
	ComputedBatch *reclaim.Resources `json:"computedBatch,omitempty"`
	Batch         *reclaim.Resources `json:"batch,omitempty"`
	// Clock says the node's clock is far from the API server's.
	Clock string `json:"clock,omitempty"`
}

// Terms are the formula's terms for one resource: Batch = min(Capacity − Safety − System − HP,
// Cap, Ceiling), floored at 0, where Cap and Ceiling count only when above 0.
type Terms struct {
	Capacity int64 `json:"capacity"`
	Safety   int64 `json:"safety"`
	System   int64 `json:"system"`
	HP       int64 `json:"hp"`
	HPUsage  int64 `json:"hpUsage"`
	Cap      int64 `json:"cap,omitempty"`
	Ceiling  int64 `json:"ceiling,omitempty"`
	Batch    int64 `json:"batch"`
	// Bound is the term that decides Batch now (reclaim.Bound), BoundText the same in words.
	Bound     reclaim.Term `json:"bound"`
	BoundText string       `json:"boundText"`
}

// CapacityStatus returns the last step's status; safe to call from any goroutine.
func (r *Reporter) CapacityStatus() CapacityStatus {
	if s := r.status.Load(); s != nil {
		return *s
	}
	return CapacityStatus{Node: r.cfg.NodeName, Why: "the reporter has not stepped yet"}
}

// recordStatus keeps this step's figures for CapacityStatus.
func (r *Reporter) recordStatus(now time.Time, want desired, settings slo.ColocationSettings, why string) {
	s := &CapacityStatus{Node: r.cfg.NodeName, Time: now, Enabled: settings.Enable, Why: why, Settings: reclaim.SettingsFrom(settings)}
	if res := want.terms; res != nil {
		s.Computed = true
		cb, mb := res.CPUBound(), res.MemoryBound()
		s.CPU = &Terms{Capacity: res.Capacity.CPUMilli, Safety: res.Safety.CPUMilli, System: res.System.CPUMilli, HP: res.HP.CPUMilli,
			HPUsage: res.HPUsage.CPUMilli, Cap: res.Cap.CPUMilli, Ceiling: res.Ceiling, Batch: res.Batch.CPUMilli,
			Bound: cb.Term, BoundText: cb.CPUText()}
		s.Memory = &Terms{Capacity: res.Capacity.MemoryBytes, Safety: res.Safety.MemoryBytes, System: res.System.MemoryBytes, HP: res.HP.MemoryBytes,
			HPUsage: res.HPUsage.MemoryBytes, Cap: res.Cap.MemoryBytes, Batch: res.Batch.MemoryBytes,
			Bound: mb.Term, BoundText: mb.MemoryText()}
	}
	if want.window.Phase != batchwindow.PhaseNone {
		w := want.window
		s.Window = &w
	}
	if want.terms != nil {
		c, b := want.computed, want.batch
		s.ComputedBatch, s.Batch = &c, &b
	}
	s.Clock = want.clock
	if r.last.valid {
		b := r.last.batch
		if !r.last.present {
			b = reclaim.Resources{}
		}
		s.Published, s.PublishedAt = &b, r.last.at
	}
	r.status.Store(s)
}
