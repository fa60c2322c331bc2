package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/metrics/reporter"
	"github.com/tandemkit/tandem/resource/qos"
)

// The simulated node's shape: what a common cloud instance for mixed workloads has.
const (
	nodeCPUMilli   = 32000
	nodeMemory     = 128 << 30
	nodeMaxPods    = 110
	systemCPUMilli = 500 // what runs outside pods: kubelet, the runtime, Tandem's agent
	systemMemory   = 2 << 30
)

// nodeLoad is one simulated node's usage by its high-priority pods, which its agent reports. Cold
// nodes stay near coldPercent; warm ones start at warmPercent and, at each report interval, step
// by 5-15% of the node with probability moveProb (bounded to 5-55%), as services' load does over a
// day; between steps the usage jitters by under half a percent, which the reporter's tolerance
// must absorb.
type nodeLoad struct {
	mu      sync.Mutex
	cold    bool
	percent float64     // the current level, of the node's CPU
	moves   []time.Time // when the level stepped
	rng     *rand.Rand
}

const (
	coldPercent = 10
	warmPercent = 40
)

// boundUsage is what the pods the benchmark placed on a node use there: its own services and
// batch pods, as a real collector would measure them.
type boundUsage struct {
	ls, be reclaim.Resources
}

// Of what they request, the placed pods use this share: services are sized for their peaks, batch
// executors use what they get.
const (
	lsUseOfRequest = 0.6
	beUseOfRequest = 0.9
)

func (l *nodeLoad) sample(now time.Time, name string, bound boundUsage) *reporter.Sample {
	l.mu.Lock()
	pct := l.percent + (l.rng.Float64()-0.5)*0.8
	l.mu.Unlock()
	ls := reclaim.Resources{CPUMilli: int64(pct / 100 * nodeCPUMilli), MemoryBytes: int64(pct / 100 * 1.2 * nodeMemory)}
	sys := reclaim.Resources{CPUMilli: systemCPUMilli, MemoryBytes: systemMemory}
	node := reclaim.Resources{
		CPUMilli:    ls.CPUMilli + sys.CPUMilli + bound.ls.CPUMilli + bound.be.CPUMilli,
		MemoryBytes: ls.MemoryBytes + sys.MemoryBytes + bound.ls.MemoryBytes + bound.be.MemoryBytes,
	}
	pods := []reporter.PodUsage{{UID: "services-of-" + name, QoS: qos.LS, Usage: ls}}
	if bound.ls != (reclaim.Resources{}) {
		pods = append(pods, reporter.PodUsage{UID: "placed-services-on-" + name, QoS: qos.LS, Usage: bound.ls})
	}
	if bound.be != (reclaim.Resources{}) {
		pods = append(pods, reporter.PodUsage{UID: "placed-batch-on-" + name, QoS: qos.BE, Usage: bound.be})
	}
	return &reporter.Sample{
		Time:     now,
		Capacity: reclaim.Resources{CPUMilli: nodeCPUMilli, MemoryBytes: nodeMemory},
		Node:     node,
		System:   sys,
		Pods:     pods,
	}
}

// step moves a warm node's level, with probability p; it reports whether it moved.
func (l *nodeLoad) step(now time.Time, p float64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cold || l.rng.Float64() >= p {
		return false
	}
	d := 5 + l.rng.Float64()*10
	if l.rng.IntN(2) == 0 {
		d = -d
	}
	next := l.percent + d
	if next < 5 || next > 55 {
		next = l.percent - d
	}
	l.percent = next
	l.moves = append(l.moves, now)
	return true
}

func (l *nodeLoad) moveTimes() []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.moves...)
}

// write is one request an agent sent, as the API server answered it.
type write struct {
	at      time.Time
	status  bool // to nodes/status (batch capacity, possibly with the annotation)
	refresh bool // the node's previous write was updateTimeThresholdSeconds ago or more
	err     bool
}

// agentAPI is what one simulated agent calls the API server with: the reporter's NodeAPI on a
// client-go clientset, recording each write.
type agentAPI struct {
	cs      kubernetes.Interface
	refresh time.Duration
	mu      sync.Mutex
	writes  []write
}

func (a *agentAPI) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return a.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (a *agentAPI) PatchNode(ctx context.Context, name string, pt types.PatchType, data []byte, sub ...string) (*corev1.Node, error) {
	// The reporter spaces writes by when it decides them; the send time is that, give or take
	// microseconds, while the answer can come seconds later from a busy API server.
	now := time.Now()
	n, err := a.cs.CoreV1().Nodes().Patch(ctx, name, pt, data, metav1.PatchOptions{}, sub...)
	a.mu.Lock()
	w := write{at: now, status: len(sub) > 0, err: err != nil}
	if k := len(a.writes); k > 0 && now.Sub(a.writes[k-1].at) >= a.refresh {
		w.refresh = true
	}
	a.writes = append(a.writes, w)
	a.mu.Unlock()
	return n, err
}

func (a *agentAPI) snapshot() []write {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]write(nil), a.writes...)
}

// agents are N simulated Tandem agents: each the node reporter tandem-proxy and tandem-nri run
// (metrics/reporter, the same code, the same decisions about when to write), fed a synthetic sample
// of its node instead of the collector's. So the API server gets exactly the writes N real agents
// would send for these loads.
type agents struct {
	names     []string
	loads     []*nodeLoad
	apis      []*agentAPI
	reporters []*reporter.Reporter
	settings  slo.ColocationSettings
	moveProb  float64
	tick      time.Duration
}

// One node in coldEvery is cold: the only ones with room for the full phase's large batch pods.
const coldEvery = 10

func isCold(i, n int) bool { return i%coldEvery == 0 && i < n }

// coldNodes is how many of n nodes are cold.
func coldNodes(n int) int { return (n + coldEvery - 1) / coldEvery }

// shippedColocation is the colocation settings deploy/slo-controller-config.yaml gives a node.
func shippedColocation(root string) (slo.ColocationSettings, error) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "slo-controller-config.yaml"))
	if err != nil {
		return slo.ColocationSettings{}, err
	}
	cfg, err := slo.ParseFile(b)
	if err != nil {
		return slo.ColocationSettings{}, err
	}
	if refused := cfg.Refused(); len(refused) > 0 {
		return slo.ColocationSettings{}, fmt.Errorf("deploy/slo-controller-config.yaml: refused sections: %v", refused)
	}
	r, err := cfg.ForNode(map[string]string{})
	if err != nil {
		return slo.ColocationSettings{}, err
	}
	return r.Colocation, nil
}

// newAgents makes one agent per node; bound says what the pods placed on a node use (nil: none).
func newAgents(cs kubernetes.Interface, names []string, settings slo.ColocationSettings, moveProb float64, seed uint64, bound func(node string) boundUsage) (*agents, error) {
	if bound == nil {
		bound = func(string) boundUsage { return boundUsage{} }
	}
	a := &agents{names: names, settings: settings, moveProb: moveProb, tick: 5 * time.Second}
	interval := time.Duration(settings.MetricReportIntervalSeconds) * time.Second
	refresh := time.Duration(settings.UpdateTimeThresholdSeconds) * time.Second
	for i, name := range names {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		l := &nodeLoad{cold: isCold(i, len(names)), percent: warmPercent, rng: rng}
		if l.cold {
			l.percent = coldPercent
		}
		api := &agentAPI{cs: cs, refresh: refresh}
		// Real agents start at different times: each first publishes after a warm-up drawn over
		// one report interval, so that their writes do not come in lockstep.
		warmup := interval/4 + time.Duration(rng.Int64N(int64(interval*3/4)))
		load := l
		r, err := reporter.New(reporter.Config{NodeName: name, Tick: a.tick, Warmup: warmup}, reporter.Deps{
			Client:   api,
			Samples:  func() *reporter.Sample { return load.sample(time.Now(), name, bound(name)) },
			Settings: func() slo.ColocationSettings { return settings },
		})
		if err != nil {
			return nil, err
		}
		a.loads, a.apis, a.reporters = append(a.loads, l), append(a.apis, api), append(a.reporters, r)
	}
	return a, nil
}

// run steps every reporter once per tick, spread evenly over the tick as independent nodes are,
// and moves the warm nodes' loads once per report interval, until ctx ends.
func (a *agents) run(ctx context.Context, workers int) {
	interval := time.Duration(a.settings.MetricReportIntervalSeconds) * time.Second
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int
			for i := w; i < len(a.reporters); i += workers {
				mine = append(mine, i)
			}
			if len(mine) == 0 {
				return
			}
			gap := a.tick / time.Duration(len(mine))
			next := time.Now().Add(time.Duration(w) * a.tick / time.Duration(workers) / time.Duration(len(mine)))
			lastMove := time.Now()
			for {
				for _, i := range mine {
					if err := sleepUntil(ctx, next); err != nil {
						return
					}
					a.reporters[i].Step(ctx)
					next = next.Add(gap)
				}
				if now := time.Now(); now.Sub(lastMove) >= interval {
					for _, i := range mine {
						a.loads[i].step(now, a.moveProb)
					}
					lastMove = now
				}
			}
		}()
	}
	wg.Wait()
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	return runctx.Sleep(ctx, d)
}

// writeStats is what the agents sent in a window.
type writeStats struct {
	nodes      int
	window     time.Duration
	total      int
	errors     int
	refresh    int
	perNodeMax int // the most writes one node sent within one report interval
	// unexplained are change writes from nodes whose load had neither stepped nor received a pod
	// for the predictor's window and an interval: the tolerance should have absorbed their jitter.
	unexplained int
}

// stats counts the writes sent between from and to. placed says when pods were bound to a node,
// which changes its usage as a step of its load does.
func (a *agents) stats(from, to time.Time, placed func(node string) []time.Time) writeStats {
	interval := time.Duration(a.settings.MetricReportIntervalSeconds) * time.Second
	// A change moves the reporter's figures for as long as it is in the peak predictor's window
	// (metricAggregateDurationSeconds), and the last move is written up to an interval later.
	settle := time.Duration(a.settings.MetricAggregateDurationSeconds)*time.Second + interval
	s := writeStats{nodes: len(a.names), window: to.Sub(from)}
	for i, api := range a.apis {
		ws := api.snapshot()
		changes := append(a.loads[i].moveTimes(), placed(a.names[i])...)
		var in []time.Time
		for _, w := range ws {
			if w.at.Before(from) || w.at.After(to) {
				continue
			}
			s.total++
			if w.err {
				s.errors++
			}
			if w.refresh {
				s.refresh++
			} else if !w.err && !changedWithin(changes, w.at, settle) {
				s.unexplained++
			}
			in = append(in, w.at)
		}
		for j := range in {
			k := j
			// A second of slack: the reporter measures the interval from its own step times.
			for k < len(in) && in[k].Sub(in[j]) < interval-time.Second {
				k++
			}
			s.perNodeMax = max(s.perNodeMax, k-j)
		}
	}
	return s
}

// perSecondPer1000 is the write rate the API server got, per 1000 nodes.
func (s writeStats) perSecondPer1000() float64 {
	if s.window <= 0 || s.nodes == 0 {
		return 0
	}
	return float64(s.total) / s.window.Seconds() / float64(s.nodes) * 1000
}

// changedWithin reports whether one of changes came at most d before t.
func changedWithin(changes []time.Time, t time.Time, d time.Duration) bool {
	for _, c := range changes {
		if !c.After(t) && t.Sub(c) <= d {
			return true
		}
	}
	return false
}
