// Package collector samples what the node and its containers use: node CPU and memory from /proc,
// per-container CPU, working set and CFS throttling from cgroups v1 (including hybrid hosts) and v2,
// pressure stall information, cycles per instruction from perf events, and run-queue latency from
// eBPF programs on the sched tracepoints (assembled in Go by the bpf package, so building Tandem
// needs no C toolchain). Each source runs on its own interval and is detected at start: a kernel
// that lacks it costs one log line, never an error.
//
// Container cgroups are read file by file (cgroupfile.go): github.com/containerd/cgroups/v3 is the
// reference the tests hold those reads to, but reading through it costs about four times as much,
// which a 1 s interval over a hundred containers cannot afford.
//
// Reclaim, suppress and evict read the usage source through Latest and Updates; every source is
// also exported to Prometheus by one custom collector that reads the latest samples at scrape time,
// so a scrape costs nothing while nobody scrapes and the sampling loop never touches metric vectors.
//
// /proc and the cgroup root are constructor arguments, so tests run on fake trees.
package collector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/resource/qos"
)

// Target is a container the node runs, as the proxy's store knows it; internal/agent builds the list
// from store (pod namespace/name/uid, container name/id, QoS class from annotation
// tandem.io/qos-class, pod cgroup parent).
type Target struct {
	Namespace, Pod, PodUID, Container, ContainerID string
	QoS                                            qos.Class // "" when unknown
	CgroupParent                                   string    // the pod's cgroup parent as kubelet named it
	// Cgroup is set for what is not a pod's container (a host application, actuate/hostapp): its
	// cgroup as a path from the hierarchy's root, read as it is instead of looking for ContainerID
	// under CgroupParent. Namespace, Pod and PodUID are empty then; ContainerID still keys it.
	Cgroup string
}

// Usage is what something uses.
type Usage struct {
	CPUMilli    int64 // average CPU use over the last interval, milli-cores
	MemoryBytes int64 // working set (usage − inactive file)
}

// ContainerUsage is one container's usage in a Snapshot.
type ContainerUsage struct {
	Target
	Usage
	ThrottledPeriods, Periods int64 // CFS counters (cumulative)
}

// Steal is the CPU time a virtual machine's host ran something else while the guest wanted its CPUs
// (the steal column of /proc/stat): on a VM whose host is busy or caps it, what fills the guest's CPUs
// is partly taken back, and the services pay for it in stalls (docs/colocation.md).
type Steal struct {
	// CPUMilli is the node's steal over the interval, in milli-cores.
	CPUMilli int64
	// PerCPU is each CPU's steal over the interval, in milli of that CPU, by CPU number.
	PerCPU map[int]int64
}

// Snapshot is one sample of the node and its containers.
type Snapshot struct {
	Time     time.Time
	Capacity Usage // node CPUs × 1000, MemTotal
	Node     Usage // from /proc/stat and /proc/meminfo
	System   Usage // node − every container's usage, floored at 0 (what is not pods)
	// Steal is the CPU the hypervisor took back from this node over the interval; not in Node.
	Steal      Steal
	Containers []ContainerUsage // per container, sorted by namespace, pod, container
}

// Deps are what the collector reads from.
type Deps struct {
	// ProcRoot is where procfs is mounted, /proc in production.
	ProcRoot string
	// CgroupRoot is the cgroup mount, /sys/fs/cgroup in production: the unified hierarchy on cgroup v2,
	// the directory holding one hierarchy per controller on v1 and hybrid hosts.
	CgroupRoot string
	// Targets lists the containers to sample; it is called once per usage interval and must be cheap.
	Targets func() []Target
	// Registerer receives the Prometheus collector; nil exports nothing.
	Registerer prometheus.Registerer
}

// Collector samples each source on its interval and keeps the latest samples.
type Collector struct {
	cfg  Config
	deps Deps

	usage    *usageSource
	psi      *psiSource
	cpi      *cpiSource
	runQueue *runQueueSource

	// extra lists targets that are not the store's containers (AddTargets); nil while there are none.
	extra atomic.Pointer[func() []Target]

	latest  atomic.Pointer[Snapshot]
	updates chan struct{}
	// usageEvery is the usage source's interval in force (SetUsageInterval); usageChanged wakes its
	// goroutine so that a shorter interval applies at once, not after the longer one has run out.
	usageEvery   atomic.Int64
	usageChanged chan struct{}

	runOnce sync.Once
}

// New builds a collector and registers its Prometheus metrics. Sources are detected in Run, where a
// context carries the logger for the one line that says a source is off.
func New(cfg Config, deps Deps) (*Collector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("collector config: %w", err)
	}
	if deps.ProcRoot == "" || deps.CgroupRoot == "" {
		return nil, errors.New("collector needs ProcRoot and CgroupRoot: pass /proc and /sys/fs/cgroup")
	}
	if deps.Targets == nil {
		deps.Targets = func() []Target { return nil }
	}
	c := &Collector{
		cfg:     cfg,
		deps:    deps,
		updates: make(chan struct{}, 1),

		usageChanged: make(chan struct{}, 1),
	}
	c.usageEvery.Store(int64(cfg.Usage.Interval))
	c.usage = newUsageSource(deps.ProcRoot, deps.CgroupRoot)
	c.psi = newPSISource(deps.ProcRoot, deps.CgroupRoot)
	c.cpi = newCPISource(deps.CgroupRoot)
	c.runQueue = newRunQueueSource(cfg.TracefsRoot, deps.ProcRoot, deps.CgroupRoot)
	if deps.Registerer != nil {
		if err := deps.Registerer.Register(newExporter(c)); err != nil {
			return nil, fmt.Errorf("register collector metrics (is a second collector registered on the same registry?): %w", err)
		}
	}
	return c, nil
}

// AddTargets has every source sample what f lists besides Deps.Targets, from the next sample on: the
// cgroups of host applications (Target.Cgroup). f is called once per interval and must be cheap. A
// second call replaces the first.
func (c *Collector) AddTargets(f func() []Target) { c.extra.Store(&f) }

// targets is Deps.Targets plus AddTargets'; without extra targets it costs one atomic load.
func (c *Collector) targets() []Target {
	ts := c.deps.Targets()
	f := c.extra.Load()
	if f == nil {
		return ts
	}
	more := (*f)()
	if len(more) == 0 {
		return ts
	}
	// Deps.Targets may hand out a cached slice: never append to it.
	return append(append(make([]Target, 0, len(ts)+len(more)), ts...), more...)
}

// Run samples until ctx is done. Each enabled source runs in its own goroutine on its own interval;
// a source the kernel lacks logs one line and stays off. Run returns nil when ctx is cancelled; it may
// be called once.
func (c *Collector) Run(ctx context.Context) error {
	started := false
	c.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("collector is already running: call Run once")
	}
	logger := klog.FromContext(ctx).WithName("collector")
	ctx = klog.NewContext(ctx, logger)

	var wg sync.WaitGroup
	// every is the source's interval, read again whenever changed fires (nil: the interval is fixed).
	start := func(name string, src Source, every func() time.Duration, changed <-chan struct{}, detect func(context.Context) error, sample func(context.Context), stop func()) {
		if !src.Enabled {
			logger.Info("Collector source disabled by config", "source", name)
			return
		}
		if err := detect(ctx); err != nil {
			logger.Info("Collector source off: the kernel does not offer it here", "source", name, "reason", err.Error())
			return
		}
		logger.Info("Collector source on", "source", name, "interval", src.Interval)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if stop != nil {
				defer stop()
			}
			interval := src.Interval
			if every != nil {
				interval = every()
			}
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-changed:
					if d := every(); d != interval {
						logger.V(2).Info("Collector source interval changed", "source", name, "interval", d, "was", interval)
						interval = d
						tick.Reset(d)
					}
				case <-tick.C:
					sample(ctx)
				}
			}
		}()
	}

	start("usage", c.cfg.Usage, func() time.Duration { return time.Duration(c.usageEvery.Load()) }, c.usageChanged, c.usage.detect, func(ctx context.Context) {
		snap := c.usage.sample(ctx, c.targets())
		if snap == nil {
			return
		}
		c.latest.Store(snap)
		select {
		case c.updates <- struct{}{}:
		default:
		}
	}, c.usage.close)
	start("psi", c.cfg.PSI, nil, nil, c.psi.detect, func(ctx context.Context) { c.psi.sample(ctx, c.targets()) }, nil)
	start("cpi", c.cfg.CPI, nil, nil, c.cpi.detect, func(ctx context.Context) { c.cpi.sample(ctx, c.targets()) }, c.cpi.close)
	start("runQueue", c.cfg.RunQueue, nil, nil, c.runQueue.detect, func(ctx context.Context) { c.runQueue.sample(ctx, c.targets(), time.Now) }, c.runQueue.close)

	<-ctx.Done()
	wg.Wait()
	return nil
}

// SetUsageInterval changes how often the usage source samples, at once, while Run goes on: CPU suppression
// needs a sample every 500 ms only while it is enabled, and sampling that fast always would double the
// collectors' idle cost (docs/node-loops.md). Safe for concurrent use.
func (c *Collector) SetUsageInterval(d time.Duration) error {
	if d < minInterval {
		return fmt.Errorf("usage interval %v is below %v", d, minInterval)
	}
	if time.Duration(c.usageEvery.Swap(int64(d))) != d {
		select {
		case c.usageChanged <- struct{}{}:
		default:
		}
	}
	return nil
}

// UsageInterval is the usage source's interval in force.
func (c *Collector) UsageInterval() time.Duration { return time.Duration(c.usageEvery.Load()) }

// Latest returns the newest usage snapshot, nil until the first interval has passed. Callers must not
// modify it: the same value is shared with every reader.
func (c *Collector) Latest() *Snapshot { return c.latest.Load() }

// RunQueue returns the run-queue source's newest sample, nil while the source is off or has not
// sampled yet. Callers must not modify it.
func (c *Collector) RunQueue() *RunQueueSample { return c.runQueue.latest.Load() }

// Updates is signalled after each new usage snapshot; one slot, so a slow reader sees one signal for
// any number of snapshots it missed and then reads Latest.
func (c *Collector) Updates() <-chan struct{} { return c.updates }
