package collector

import (
	"errors"
	"fmt"
	"time"
)

// Source configures one collector source.
type Source struct {
	// Enabled switches the source on; an enabled source the kernel lacks still stays off.
	Enabled bool `json:"enabled"`
	// Interval between samples.
	Interval time.Duration `json:"interval"`
}

// Config configures the collector.
type Config struct {
	// NodeName is the value of the node label on every metric.
	NodeName string `json:"nodeName"`
	// Usage is node CPU and memory and per-container CPU, working set and throttling: the source
	// that reclaim, suppress and evict read, so its interval bounds how fast they react.
	Usage Source `json:"usage"`
	// PSI is pressure stall information for the node and, on cgroup v2, per pod.
	PSI Source `json:"psi"`
	// CPI is cycles and instructions per container from hardware perf counters.
	CPI Source `json:"cpi"`
	// RunQueue is the time runnable tasks wait for a CPU, per container, from eBPF.
	RunQueue Source `json:"runQueue"`
	// TracefsRoot is where tracefs is mounted; the run-queue source needs its sched tracepoints.
	TracefsRoot string `json:"tracefsRoot"`
}

// DefaultConfig samples usage every second and the costlier sources less often.
func DefaultConfig() Config {
	return Config{
		// 1s costs 0.52% of one core over 100 containers. Where CPU suppression runs, tandem-proxy samples
		// every 500ms instead (0.98%): suppression reacts on each sample and must react within 1s.
		Usage: Source{Enabled: true, Interval: time.Second},
		PSI:   Source{Enabled: true, Interval: 5 * time.Second},
		CPI:   Source{Enabled: true, Interval: 10 * time.Second},
		// Off by default: its eBPF programs run on every context switch, measured at 1.3–4.6% of one core
		// in the kernel on a busy 2-CPU node, beyond the collectors' 2% budget. Operators who want
		// run-queue latency turn it on.
		RunQueue:    Source{Enabled: false, Interval: 10 * time.Second},
		TracefsRoot: "/sys/kernel/tracing",
	}
}

// minInterval keeps a typo (1ms) from turning the collector into the node's busiest process.
const minInterval = 100 * time.Millisecond

// Validate reports every bad field, by its path.
func (c Config) Validate() error {
	var errs []error
	for _, s := range []struct {
		name string
		src  Source
	}{{"usage", c.Usage}, {"psi", c.PSI}, {"cpi", c.CPI}, {"runQueue", c.RunQueue}} {
		if s.src.Enabled && s.src.Interval < minInterval {
			errs = append(errs, fmt.Errorf("%s.interval: %v is below %v; raise it or disable the source", s.name, s.src.Interval, minInterval))
		}
	}
	if c.RunQueue.Enabled && c.TracefsRoot == "" {
		errs = append(errs, errors.New("tracefsRoot: empty; set it to /sys/kernel/tracing or disable runQueue"))
	}
	return errors.Join(errs...)
}

// FindTracefs returns the first of the usual tracefs mount points that has the sched tracepoints the
// run-queue source needs, or the first one when none has (the source then says what is missing): its own
// mount point, and under debugfs where a distribution mounts only that (as Debian without systemd does).
func FindTracefs(exists func(string) bool) string {
	tracefsRoots := [...]string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}
	for _, root := range tracefsRoots {
		if exists(root + "/events/sched/sched_switch") {
			return root
		}
	}
	return tracefsRoots[0]
}
