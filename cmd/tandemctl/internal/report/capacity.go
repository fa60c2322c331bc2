package report

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/metrics/reporter"
)

// Capacity returns the batch capacity the node reporter last computed, term by term.
func (c *Client) Capacity(ctx context.Context) (*reporter.CapacityStatus, error) {
	return getStatus[reporter.CapacityStatus](ctx, c, "/debug/capacity")
}

// gib renders bytes as GiB with two decimals.
func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// WriteCapacity renders the batch capacity formula with this node's figures, one column per
// resource, the term that decides each, and what the Node carries.
func WriteCapacity(w io.Writer, s *reporter.CapacityStatus, format Format) error {
	if format == JSON {
		return writeJSON(w, s)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	state := "off"
	if s.Enabled {
		state = "on"
	}
	fmt.Fprintf(tw, "node\t%s\n", s.Node)
	fmt.Fprintf(tw, "colocation\t%s\n", state)
	if s.Why != "" {
		fmt.Fprintf(tw, "note\t%s\n", s.Why)
	}
	if s.Computed && s.CPU != nil && s.Memory != nil {
		c, m := s.CPU, s.Memory
		cpu := func(v int64) string { return cores(v) + " cores" }
		opt := func(v int64, f func(int64) string) string {
			if v <= 0 {
				return "none"
			}
			return f(v)
		}
		fmt.Fprintf(tw, "computed\t%s\n", s.Time.Format(time.TimeOnly))
		fmt.Fprintf(tw, "\tcpu\tmemory\n")
		fmt.Fprintf(tw, "capacity\t%s\t%s\n", cpu(c.Capacity), gib(m.Capacity))
		fmt.Fprintf(tw, "− safety (reclaimThresholdPercent %d / %d)\t%s\t%s\n", s.Settings.CPUReclaimThresholdPercent, s.Settings.MemoryReclaimThresholdPercent, cpu(c.Safety), gib(m.Safety))
		fmt.Fprintf(tw, "− system (max of usage and reserved)\t%s\t%s\n", cpu(c.System), gib(m.System))
		fmt.Fprintf(tw, "− high-priority pods (%s / %s)\t%s\t%s\n", policy(string(s.Settings.CPUCalculatePolicy)), policy(string(s.Settings.MemoryCalculatePolicy)), cpu(c.HP), gib(m.HP))
		fmt.Fprintf(tw, "  (their usage)\t%s\t%s\n", cpu(c.HPUsage), gib(m.HPUsage))
		fmt.Fprintf(tw, "cap (batchThresholdPercent)\t%s\t%s\n", opt(c.Cap, cpu), opt(m.Cap, gib))
		fmt.Fprintf(tw, "steal headroom ceiling\t%s\t-\n", opt(c.Ceiling, cpu))
		fmt.Fprintf(tw, "= batch\t%s\t%s\n", cpu(c.Batch), gib(m.Batch))
		fmt.Fprintf(tw, "decided by\t%s\t%s\n", c.BoundText, m.BoundText)
		if wd := s.Window; wd != nil && wd.Phase.Limits() && s.Batch != nil {
			fmt.Fprintf(tw, "× batch window (outsideCapacityPercent %d)\t%s\t%s\n", wd.OutsidePercent, cpu(s.Batch.CPUMilli), gib(s.Batch.MemoryBytes))
		}
	}
	if wd := s.Window; wd != nil {
		fmt.Fprintf(tw, "batch windows\t%s\n", wd.Describe)
		line := string(wd.Phase)
		if wd.Window != "" {
			line += fmt.Sprintf(" (%s)", wd.Window)
		}
		if !wd.ClosedAt.IsZero() && (wd.Phase == batchwindow.PhaseClosed || wd.Phase == batchwindow.PhaseEvicting) {
			line += ", closed at " + wd.ClosedAt.Format(time.RFC3339)
		}
		if !wd.Next.IsZero() {
			line += ", next change " + wd.Next.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "window now\t%s\n", line)
	}
	if s.Clock != "" {
		fmt.Fprintf(tw, "clock\t%s\n", s.Clock)
	}
	if s.Published != nil {
		fmt.Fprintf(tw, "on the Node\tbatch-cpu %s, batch-memory %s, written %s\n", cores(s.Published.CPUMilli), gib(s.Published.MemoryBytes), s.PublishedAt.Format(time.TimeOnly))
	} else {
		fmt.Fprintln(tw, "on the Node\tnothing written yet")
	}
	return tw.Flush()
}

// policy names an empty calculate policy by what it does.
func policy(p string) string {
	if p == "" {
		return "usage"
	}
	return p
}
