package report

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandemkit/tandem/metrics/headroom"
)

// Headroom returns the steal headroom's last sample and decision.
func (c *Client) Headroom(ctx context.Context) (*headroom.Status, error) {
	return getStatus[headroom.Status](ctx, c, "/debug/headroom")
}

// cores renders milli-cores as CPUs with two decimals.
func cores(m int64) string { return fmt.Sprintf("%.2f", float64(m)/1000) }

// WriteHeadroom renders the steal headroom: whether it runs and why, the steal per CPU, and the BE
// ceiling with the reason of the last hold.
func WriteHeadroom(w io.Writer, s *headroom.Status, format Format) error {
	if format == JSON {
		return writeJSON(w, s)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	state := "off"
	if s.Enabled {
		state = "on"
	}
	fmt.Fprintf(tw, "steal headroom\t%s (%s)\n", state, s.Why)
	if s.Time.IsZero() {
		fmt.Fprintln(tw, "sample\tnone yet")
		return tw.Flush()
	}
	ceiling := "none: BE may use every CPU the node has"
	if s.Limited {
		ceiling = fmt.Sprintf("%s CPUs of %s", cores(s.CeilingMilli), cores(s.CapacityMilli))
	}
	fmt.Fprintf(tw, "BE ceiling\t%s\n", ceiling)
	fmt.Fprintf(tw, "steal\t%s CPUs%s; %s without BE\n", cores(s.StealMilli), perCPU(s.PerCPUMilli), cores(s.BaselineMilli))
	fmt.Fprintf(tw, "use\tBE %s CPUs, node %s CPUs\n", cores(s.BEUsedMilli), cores(s.GuestMilli))
	fmt.Fprintf(tw, "last sample\t%s: %s\n", s.Time.Format(time.TimeOnly), s.Decision)
	if s.Holds > 0 {
		fmt.Fprintf(tw, "holds\t%d, the last at %s: %s\n", s.Holds, s.LastHold.Format(time.TimeOnly), s.LastHoldReason)
	}
	if s.KneeMilli > 0 {
		fmt.Fprintf(tw, "knee\tthe host took CPU back with the node at %s CPUs; the ceiling creeps near it\n", cores(s.KneeMilli))
	}
	return tw.Flush()
}

// perCPU renders each CPU's steal as a share of it, in CPU order: " (cpu0 12%, cpu1 0%)".
func perCPU(m map[int]int64) string {
	if len(m) == 0 {
		return ""
	}
	cpus := make([]int, 0, len(m))
	for n := range m {
		cpus = append(cpus, n)
	}
	slices.Sort(cpus)
	parts := make([]string, 0, len(cpus))
	for _, n := range cpus {
		parts = append(parts, fmt.Sprintf("cpu%d %d%%", n, (m[n]+5)/10))
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
