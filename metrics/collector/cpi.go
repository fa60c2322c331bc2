package collector

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"
)

// counterReading is one perf counter read with PERF_FORMAT_TOTAL_TIME_ENABLED|RUNNING: when more
// events are open than the PMU has counters, the kernel multiplexes them and a counter only counts
// for running/enabled of the time, so its value must be scaled up.
type counterReading struct {
	value, enabled, running uint64
}

// counterSample is a container's cycles and instructions, summed over CPUs.
type counterSample struct {
	cycles, instructions counterReading
}

// add sums per-CPU readings; cgroup perf events must be opened once per CPU.
func (s counterSample) add(o counterSample) counterSample {
	sum := func(a, b counterReading) counterReading {
		return counterReading{value: a.value + b.value, enabled: a.enabled + b.enabled, running: a.running + b.running}
	}
	return counterSample{cycles: sum(s.cycles, o.cycles), instructions: sum(s.instructions, o.instructions)}
}

// scaledDelta is how much a counter advanced between two readings, corrected for multiplexing. It
// reports false when the counter did not run at all in between (nothing of the cgroup ran, or the PMU
// was busy the whole time) or went backwards.
func scaledDelta(prev, cur counterReading) (float64, bool) {
	if cur.value < prev.value || cur.enabled < prev.enabled || cur.running <= prev.running {
		return 0, false
	}
	dv := float64(cur.value - prev.value)
	de := float64(cur.enabled - prev.enabled)
	dr := float64(cur.running - prev.running)
	return dv * de / dr, true
}

// cpiResult is a container's counters over one interval.
type cpiResult struct {
	cycles, instructions float64 // scaled deltas
	cpi                  float64
}

// computeCPI turns two counter samples into cycles per instruction over the interval between them.
// A rising CPI for an LS container at the same load is the sign of interference (cache, memory
// bandwidth) that CPU usage alone does not show.
func computeCPI(prev, cur counterSample) (cpiResult, bool) {
	cycles, ok1 := scaledDelta(prev.cycles, cur.cycles)
	instr, ok2 := scaledDelta(prev.instructions, cur.instructions)
	if !ok1 || !ok2 || instr == 0 {
		return cpiResult{}, false
	}
	return cpiResult{cycles: cycles, instructions: instr, cpi: cycles / instr}, true
}

// counterGroup is the open cycles and instructions events of one container cgroup on every CPU.
type counterGroup interface {
	read() (counterSample, error)
	close()
}

// perfOpener opens hardware counters; perf_linux.go has the real one.
type perfOpener interface {
	// probe opens and closes a cycles counter for the calling thread, to learn whether the machine
	// has hardware counters at all (VMs often have none: ENOENT).
	probe() error
	// openCgroup counts cycles and instructions of the tasks in the cgroup directory on every CPU.
	openCgroup(dir string) (counterGroup, error)
}

type cpiContainer struct {
	Target
	cycles, instructions float64 // cumulative scaled counts since Tandem opened the events
	cpi                  float64
	hasCPI               bool
}

type cpiTarget struct {
	group  counterGroup
	prev   counterSample
	seen   bool
	cycles float64
	instr  float64
}

// cpiSource keeps one counter group per container and reads them every interval.
type cpiSource struct {
	cgroupRoot string
	opener     perfOpener

	mu      sync.Mutex
	reader  cgroupReader
	targets map[string]*cpiTarget
	latest  atomic.Pointer[[]cpiContainer]
	failed  bool // an open failure was logged
}

func newCPISource(cgroupRoot string) *cpiSource {
	return &cpiSource{cgroupRoot: cgroupRoot, opener: newPerfOpener(), targets: map[string]*cpiTarget{}}
}

func (c *cpiSource) detect(context.Context) error {
	if err := c.opener.probe(); err != nil {
		return fmt.Errorf("no hardware cycle counter: %w", err)
	}
	r, err := detectReader(c.cgroupRoot)
	if err != nil {
		return err
	}
	c.reader = r
	if dir := c.perfDir("/"); !dirExists(dir) {
		return fmt.Errorf("no perf_event cgroup hierarchy at %s", dir)
	}
	return nil
}

// perfDir is the cgroup directory perf_event_open wants: the perf_event hierarchy on v1.
func (c *cpiSource) perfDir(rel string) string {
	if c.reader.version() == 1 {
		return filepath.Join(c.cgroupRoot, "perf_event", rel)
	}
	return filepath.Join(c.cgroupRoot, rel)
}

func (c *cpiSource) sample(ctx context.Context, targets []Target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	logger := klog.FromContext(ctx)
	live := map[string]bool{}
	out := make([]cpiContainer, 0, len(targets))
	for _, t := range targets {
		if t.ContainerID == "" || live[t.ContainerID] {
			continue
		}
		live[t.ContainerID] = true
		st := c.targets[t.ContainerID]
		if st == nil {
			rel := resolveCgroup(c.perfDir, t)
			if rel == "" {
				continue
			}
			g, err := c.opener.openCgroup(c.perfDir(rel))
			if err != nil {
				if !c.failed {
					logger.Error(err, "Cannot open perf counters for a container; CPI stays absent for it", "container", t.Container, "pod", klog.KRef(t.Namespace, t.Pod))
					c.failed = true
				}
				continue
			}
			st = &cpiTarget{group: g}
			c.targets[t.ContainerID] = st
		}
		s, err := st.group.read()
		if err != nil {
			st.group.close()
			delete(c.targets, t.ContainerID)
			continue
		}
		cc := cpiContainer{Target: t}
		if st.seen {
			if r, ok := computeCPI(st.prev, s); ok {
				st.cycles += r.cycles
				st.instr += r.instructions
				cc.cpi, cc.hasCPI = r.cpi, true
			}
		}
		st.prev, st.seen = s, true
		cc.cycles, cc.instructions = st.cycles, st.instr
		out = append(out, cc)
	}
	for id, st := range c.targets {
		if !live[id] {
			st.group.close()
			delete(c.targets, id)
		}
	}
	c.latest.Store(&out)
}

func (c *cpiSource) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, st := range c.targets {
		st.group.close()
		delete(c.targets, id)
	}
}
