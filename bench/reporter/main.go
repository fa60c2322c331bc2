// Command reporter measures how often Tandem's node reporter writes the Node in a steady state,
// against its target: 0 patches per minute while nothing moves beyond resourceDiffThreshold,
// apart from the rewrite that updateTimeThresholdSeconds forces. It then steps the load once and
// checks that batch capacity is republished exactly once.
//
// It drives the reporter with client-go's fake clientset (no API server is needed to count
// requests) and a fake clock, one collector sample per simulated second, so an hour of node time
// takes a few seconds and every run gives the same figures for the same --seed.
//
//	go run ./bench/reporter [--minutes 60] [--pods 20] [--noise 0.03] [--seed 1] [--slo-config file]
//
// Patches are counted per Node write (the status and the annotation are separate requests) and
// classed by why they happened: "first" at start, "refresh" when updateTimeThresholdSeconds had
// passed since the previous write of the same kind, "change" otherwise. The targets apply to
// "change": none in the steady state, and exactly one status patch for the step (the annotation
// is written with it, and once more a report interval later when its usage means have settled).
// It exits 1 when a target is missed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/kubeclient/kubeclienttest"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/metrics/reporter"
	"github.com/tandemkit/tandem/resource/qos"
)

const (
	nodeName = "bench-node"
	gi       = int64(1) << 30
)

type options struct {
	minutes   int
	pods      int
	noise     float64
	seed      uint64
	sloConfig string
	jsonPath  string
	verbose   bool
}

// errMissed is returned when the run worked but a target was missed.
var errMissed = errors.New("a patch-rate target was missed")

func main() {
	var o options
	fs := pflag.NewFlagSet("reporter", pflag.ExitOnError)
	fs.IntVar(&o.minutes, "minutes", 60, "simulated minutes of steady load")
	fs.IntVar(&o.pods, "pods", 20, "service (LS) pods on the node; as many BE pods run beside them")
	fs.Float64Var(&o.noise, "noise", 0.03, "relative noise on every pod's usage per sample (uniform ±)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the noise")
	fs.StringVar(&o.sloConfig, "slo-config", "", "slo-controller-config (seed 004 format) to use; default: Tandem's defaults with colocation on")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&o.verbose, "verbose", false, "print every change patch")
	klog.InitFlags(nil)
	_ = fs.Parse(os.Args[1:])
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// counts are the patches of one phase by kind ("status" or "annotation") and reason.
type counts map[string]map[string]int

func (c counts) add(kind, reason string) {
	if c[kind] == nil {
		c[kind] = map[string]int{}
	}
	c[kind][reason]++
}

type results struct {
	SteadyMinutes          float64 `json:"steadyMinutes"`
	Steady                 counts  `json:"steady"`
	ChangePatchesPerMinute float64 `json:"changePatchesPerMinute"`
	AllPatchesPerMinute    float64 `json:"allPatchesPerMinute"`
	Step                   counts  `json:"step"`
	StepBatchCPUBefore     int64   `json:"stepBatchCPUMilliBefore"`
	StepBatchCPUAfter      int64   `json:"stepBatchCPUMilliAfter"`
	StepCostMicros         float64 `json:"stepCostMicroseconds"`
}

func run(ctx context.Context, o options) error {
	if o.minutes <= 0 || o.pods <= 0 || o.noise < 0 || o.noise >= 1 {
		return errors.New("--minutes and --pods must be positive and --noise within [0, 1)")
	}
	settings, err := colocation(o.sloConfig)
	if err != nil {
		return err
	}
	client := fake.NewClientset(node())
	start := time.Date(2026, 11, 21, 6, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	var current *reporter.Sample
	r, err := reporter.New(reporter.Config{NodeName: nodeName}, reporter.Deps{
		Client:   kubeclienttest.Clientset{Interface: client},
		Samples:  func() *reporter.Sample { return current },
		Settings: func() slo.ColocationSettings { return settings },
		Clock:    clk,
	})
	if err != nil {
		return err
	}

	rng := rand.New(rand.NewPCG(o.seed, 0))
	l := load{pods: o.pods, noise: o.noise, rng: rng}
	refresh := time.Duration(settings.UpdateTimeThresholdSeconds) * time.Second
	last := map[string]time.Time{}
	seen := 0
	var stepTime time.Duration
	var steps int
	// phase runs d of simulated time, one sample and one evaluation a second.
	phase := func(d time.Duration) counts {
		c := counts{}
		for end := clk.Now().Add(d); clk.Now().Before(end); clk.Step(time.Second) {
			now := clk.Now()
			current = l.sample(now)
			began := time.Now()
			r.Step(ctx)
			stepTime += time.Since(began)
			steps++
			actions := client.Actions()
			for _, a := range actions[seen:] {
				p, ok := a.(k8stesting.PatchAction)
				if !ok {
					continue
				}
				kind := "annotation"
				if p.GetSubresource() == "status" {
					kind = "status"
				}
				prev, ok := last[kind]
				reason := "change"
				switch {
				case !ok:
					reason = "first"
				case now.Sub(prev) >= refresh:
					reason = "refresh"
				}
				c.add(kind, reason)
				if o.verbose && reason == "change" {
					fmt.Printf("  %s %s patch at %s: %s\n", reason, kind, now.Sub(start), p.GetPatch())
				}
				last[kind] = now
			}
			seen = len(actions)
		}
		return c
	}

	steady := time.Duration(o.minutes) * time.Minute
	res := results{}
	res.Steady = phase(steady)
	// Step the load half-way between two refreshes, so that the step's patch cannot be mistaken
	// for a refresh; the extra steady time counts as steady.
	if prev, ok := last["status"]; ok {
		extra := (refresh/2 - clk.Now().Sub(prev)%refresh + refresh) % refresh
		for kind, reasons := range phase(extra) {
			for reason, n := range reasons {
				res.Steady[kind][reason] += n
			}
		}
		steady += extra
	}
	minutes := steady.Minutes()
	res.SteadyMinutes = minutes
	total := 0
	for _, reasons := range res.Steady {
		for reason, n := range reasons {
			if reason != "first" {
				total += n
			}
		}
	}
	change := res.Steady["status"]["change"] + res.Steady["annotation"]["change"]
	res.ChangePatchesPerMinute = float64(change) / minutes
	res.AllPatchesPerMinute = float64(total) / minutes
	res.StepBatchCPUBefore = batchCPU(ctx, client)

	// One step: the first service pod triples its load (about 3 cores more), a move well past the
	// threshold. Five minutes cover the predictor's reaction and the annotation's mean settling.
	l.hot = true
	res.Step = phase(5 * time.Minute)
	res.StepBatchCPUAfter = batchCPU(ctx, client)
	res.StepCostMicros = float64(stepTime.Microseconds()) / float64(steps)

	fmt.Printf("node reporter patch rate, %.1f simulated minutes, %d LS + %d BE pods, noise ±%.0f%%\n",
		minutes, o.pods, o.pods, o.noise*100)
	fmt.Printf("  knobs: resourceDiffThreshold %.2f, updateTimeThresholdSeconds %d, metricAggregateDurationSeconds %d, metricReportIntervalSeconds %d\n",
		settings.ResourceDiffThreshold, settings.UpdateTimeThresholdSeconds, settings.MetricAggregateDurationSeconds, settings.MetricReportIntervalSeconds)
	fmt.Printf("  steady: status %v, annotation %v\n", res.Steady["status"], res.Steady["annotation"])
	fmt.Printf("  steady: %.3f change patches/minute (target 0), %.3f patches/minute including refreshes\n",
		res.ChangePatchesPerMinute, res.AllPatchesPerMinute)
	fmt.Printf("  step:   status %v, annotation %v; batch cpu %dm -> %dm\n",
		res.Step["status"], res.Step["annotation"], res.StepBatchCPUBefore, res.StepBatchCPUAfter)
	fmt.Printf("  cost:   %.1f µs per evaluation (fake API server)\n", res.StepCostMicros)
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return fmt.Errorf("encode results: %w", err)
		}
		if err := os.WriteFile(o.jsonPath, b, 0o644); err != nil {
			return fmt.Errorf("write results: %w", err)
		}
	}

	var missed []string
	if change != 0 {
		missed = append(missed, fmt.Sprintf("steady state: %d change patches, want 0", change))
	}
	if n := res.Step["status"]["change"]; n != 1 {
		missed = append(missed, fmt.Sprintf("step: %d status change patches, want exactly 1", n))
	}
	if res.StepBatchCPUAfter >= res.StepBatchCPUBefore {
		missed = append(missed, "step: batch cpu did not drop")
	}
	if len(missed) > 0 {
		for _, m := range missed {
			fmt.Println("  MISSED:", m)
		}
		return errMissed
	}
	fmt.Println("  all targets met")
	return nil
}

// colocation is the resolved colocation-config: from the file, or the defaults (which carry
// seed 004's values) with colocation switched on.
func colocation(path string) (slo.ColocationSettings, error) {
	cfg := slo.DefaultConfig()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return slo.ColocationSettings{}, fmt.Errorf("read --slo-config: %w", err)
		}
		if cfg, err = slo.ParseFile(raw); err != nil {
			return slo.ColocationSettings{}, fmt.Errorf("parse --slo-config: %w", err)
		}
	}
	r, err := cfg.ForNode(nil)
	if err != nil {
		return slo.ColocationSettings{}, fmt.Errorf("resolve colocation-config: %w", err)
	}
	r.Colocation.Enable = true
	return r.Colocation, nil
}

// node is 32 cores and 128 GiB with 1 core and 4 GiB reserved.
func node() *corev1.Node {
	rl := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Status:     corev1.NodeStatus{Capacity: rl("32", "128Gi"), Allocatable: rl("31", "124Gi")},
	}
}

func batchCPU(ctx context.Context, client *fake.Clientset) int64 {
	n, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return -1
	}
	q, ok := n.Status.Allocatable["kubernetes.io/batch-cpu"]
	if !ok {
		return -1
	}
	return q.Value()
}

// load is the synthetic node: pods LS pods of 300m and 1 GiB each, as many BE pods of 200m and
// 512 MiB, 1.5 cores and 3 GiB of system use, every figure with uniform noise.
type load struct {
	pods  int
	noise float64
	rng   *rand.Rand
	hot   bool // the first LS pod runs at 3 cores more
}

func (l *load) jitter(v int64) int64 {
	return int64(float64(v) * (1 + l.noise*(2*l.rng.Float64()-1)))
}

func (l *load) sample(at time.Time) *reporter.Sample {
	s := &reporter.Sample{Time: at, Capacity: reclaim.Resources{CPUMilli: 32000, MemoryBytes: 128 * gi}}
	add := func(uid string, class qos.Class, cpu, mem int64) {
		u := reclaim.Resources{CPUMilli: l.jitter(cpu), MemoryBytes: l.jitter(mem)}
		s.Pods = append(s.Pods, reporter.PodUsage{UID: uid, QoS: class, Usage: u})
		s.Node.CPUMilli += u.CPUMilli
		s.Node.MemoryBytes += u.MemoryBytes
	}
	for i := range l.pods {
		cpu := int64(300)
		if i == 0 && l.hot {
			cpu += 3000
		}
		add(fmt.Sprintf("ls-%d", i), qos.LS, cpu, gi)
		add(fmt.Sprintf("be-%d", i), qos.BE, 200, gi/2)
	}
	s.System = reclaim.Resources{CPUMilli: l.jitter(1500), MemoryBytes: l.jitter(3 * gi)}
	s.Node.CPUMilli += s.System.CPUMilli
	s.Node.MemoryBytes += s.System.MemoryBytes
	return s
}
