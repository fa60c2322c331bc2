package report

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/tandemkit/tandem/metrics/interference"
)

// Interference returns the LS wait guard's last sample and decision.
func (c *Client) Interference(ctx context.Context) (*interference.Status, error) {
	return getStatus[interference.Status](ctx, c, "/debug/interference")
}

// WriteInterference renders the LS wait guard: whether it runs, LS pods' slow waits in the last
// run-queue sample, the BE ceiling, and how the last hold turned out.
func WriteInterference(w io.Writer, s *interference.Status, format Format) error {
	if format == JSON {
		return writeJSON(w, s)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	state := "off (resource-threshold-config lsWaitGuard: false)"
	if s.Enabled {
		state = fmt.Sprintf("on: BE held back while more than 1%% of LS waits for a CPU last %v or longer", time.Duration(s.ThresholdMicros)*time.Microsecond)
	}
	fmt.Fprintf(tw, "LS wait guard\t%s\n", state)
	if s.Why != "" {
		fmt.Fprintf(tw, "not running\t%s\n", s.Why)
	}
	if s.Time.IsZero() {
		fmt.Fprintln(tw, "sample\tnone yet")
		return tw.Flush()
	}
	ceiling := "none: BE may use every CPU the node has"
	if s.Limited {
		ceiling = fmt.Sprintf("%s CPUs of %s", cores(s.CeilingMilli), cores(s.CapacityMilli))
	}
	fmt.Fprintf(tw, "BE ceiling\t%s\n", ceiling)
	worst := ""
	if s.Worst != "" {
		worst = ", most in " + s.Worst
	}
	fmt.Fprintf(tw, "LS waits\t%d in %v, %v waited in all, %d (%.1f%%) slow%s\n", s.Waits, s.Interval.Round(time.Millisecond),
		s.Waited.Round(time.Millisecond), s.SlowWaits, s.SlowPercent(), worst)
	fmt.Fprintf(tw, "BE use\t%s CPUs\n", cores(s.BEUsedMilli))
	fmt.Fprintf(tw, "last sample\t%s: %s\n", s.Time.Format(time.TimeOnly), s.Decision)
	if s.Holds > 0 {
		fmt.Fprintf(tw, "holds\t%d, the last at %s: %s\n", s.Holds, s.LastHold.Format(time.TimeOnly), s.LastHoldReason)
	}
	if s.LastVerdict != "" {
		fmt.Fprintf(tw, "last verdict\t%s\n", s.LastVerdict)
	}
	if !s.IgnoreUntil.IsZero() && s.IgnoreUntil.After(s.Time) {
		fmt.Fprintf(tw, "ignoring\tLS waits hold BE no more until %s: holding it did not help\n", s.IgnoreUntil.Format(time.TimeOnly))
	}
	return tw.Flush()
}
