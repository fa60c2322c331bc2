package extender

import (
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// cacheWith feeds nodes and pods through the same event handlers the informers call.
func cacheWith(t *testing.T, cfg Config, nodes []testNode, pods []testPod) *NodeCache {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	c := newNodeCache(cfg)
	for _, n := range nodes {
		c.onNode(logger, n.build(t))
	}
	for _, p := range pods {
		c.onPod(p.build())
	}
	return c
}

func TestFilterNode(t *testing.T) {
	t.Parallel()
	fresh := func(cpuMilli int64, memory int64) *nodeMetricArgs {
		return &nodeMetricArgs{age: 30 * time.Second, cpu: cpuMilli, memory: memory, reclaimCPU: 3000, reclaimMemory: 8 * gi}
	}
	tests := []struct {
		name   string
		cfg    func(*Config)
		node   *testNode // nil: n1 with 4 batch CPUs and 16Gi batch memory allocatable
		metric *nodeMetricArgs
		pods   []testPod // assigned to node "n1"
		pod    testPod   // the pod being scheduled
		want   Reason
	}{
		{name: "cold node takes a service pod", metric: fresh(2000, 8*gi), pod: lsPod("new", "", "1", "1Gi")},
		{name: "cpu above 65%", metric: fresh(5600, 8*gi), pod: lsPod("new", "", "1", "1Gi"), want: ReasonCPUUsage},
		{name: "memory above 95%", metric: fresh(1000, 31*gi), pod: lsPod("new", "", "1", "1Gi"), want: ReasonMemoryUsage},
		{
			name: "pods assigned since the report push cpu over the threshold", metric: fresh(4800, 8*gi),
			pods: []testPod{lsPod("pending", "n1", "1", "1Gi")},
			pod:  lsPod("new", "", "100m", "1Gi"), want: ReasonCPUUsage,
		},
		{
			name: "a pod running through the whole report window is already in the usage", metric: fresh(4800, 8*gi),
			pods: []testPod{withRunning(lsPod("old", "n1", "1", "1Gi"), 10*time.Minute)},
			pod:  lsPod("new", "", "100m", "1Gi"),
		},
		{
			name: "a pod started inside the report window is only partly in the usage", metric: fresh(4800, 8*gi),
			pods: []testPod{withRunning(lsPod("young", "n1", "1", "1Gi"), 45*time.Second)},
			pod:  lsPod("new", "", "100m", "1Gi"), want: ReasonCPUUsage,
		},
		{
			name: "pods without requests are estimated with the defaults", metric: fresh(5000, 8*gi),
			pods: []testPod{{name: "a", node: "n1"}, {name: "b", node: "n1"}},
			pod:  lsPod("new", "", "100m", "1Gi"), want: ReasonCPUUsage, // 5000+2×250 = 68.75%
		},
		{
			name: "node annotation raises the cpu threshold", node: &testNode{name: "n1", thresholds: `{"cpu":80}`},
			metric: fresh(6000, 8*gi), pod: lsPod("new", "", "1", "1Gi"),
		},
		{
			name: "node annotation lowers the memory threshold", node: &testNode{name: "n1", thresholds: `{"memory":50}`},
			metric: fresh(1000, 20*gi), pod: lsPod("new", "", "1", "1Gi"), want: ReasonMemoryUsage,
		},
		{
			name: "broken threshold annotation keeps the cluster thresholds", node: &testNode{name: "n1", thresholds: `{"cpu":"high"}`},
			metric: fresh(6000, 8*gi), pod: lsPod("new", "", "1", "1Gi"), want: ReasonCPUUsage,
		},
		{
			name: "a threshold of 0 disables the check", cfg: func(c *Config) { c.UsageThresholds.CPU = 0 },
			metric: fresh(7900, 8*gi), pod: lsPod("new", "", "1", "1Gi"),
		},
		{
			name: "stale metric passes a service pod by default", metric: &nodeMetricArgs{age: 20 * time.Minute, cpu: 7900, memory: 8 * gi},
			pod: lsPod("new", "", "1", "1Gi"),
		},
		{
			name: "stale metric rejects a batch pod by default", metric: &nodeMetricArgs{age: 20 * time.Minute, reclaimCPU: 3000, reclaimMemory: 8 * gi},
			pod: batchPod("new", "", "1000", "1Gi"), want: ReasonNodeMetricExpired,
		},
		{
			name: "stale metric rejects a service pod when configured", cfg: func(c *Config) { c.ExpiredMetricPolicy.OtherPods = Reject },
			metric: &nodeMetricArgs{age: 20 * time.Minute}, pod: lsPod("new", "", "1", "1Gi"), want: ReasonNodeMetricExpired,
		},
		{
			name: "stale metric passes a batch pod when configured, capacity still checked", cfg: func(c *Config) { c.ExpiredMetricPolicy.BatchPods = Pass },
			metric: &nodeMetricArgs{age: 20 * time.Minute, reclaimCPU: 500, reclaimMemory: 8 * gi},
			pod:    batchPod("new", "", "1000", "1Gi"), want: ReasonBatchCPU,
		},
		{name: "metric missing rejects a batch pod", pod: batchPod("new", "", "1000", "1Gi"), want: ReasonNodeMetricMissing},
		{name: "metric missing passes a service pod", pod: lsPod("new", "", "1", "1Gi")},
		{
			name: "unparsable metric counts as missing", node: &testNode{name: "n1", rawMetric: `{"updateTime":"yesterday"}`},
			pod: batchPod("new", "", "1000", "1Gi"), want: ReasonNodeMetricMissing,
		},
		{name: "unknown node rejects a batch pod", node: &testNode{name: "other"}, pod: batchPod("new", "", "1000", "1Gi"), want: ReasonNodeUnknown},
		{name: "unknown node passes a service pod", node: &testNode{name: "other"}, pod: lsPod("new", "", "1", "1Gi")},
		{name: "batch pod fits reclaimable capacity", metric: fresh(2000, 8*gi), pod: batchPod("new", "", "1000", "1Gi")},
		{
			name: "batch requests already placed use up reclaimable cpu", metric: fresh(2000, 8*gi),
			pods: []testPod{withRunning(batchPod("be1", "n1", "1500", "1Gi"), time.Hour), withRunning(batchPod("be2", "n1", "1000", "1Gi"), time.Hour)},
			pod:  batchPod("new", "", "1000", "1Gi"), want: ReasonBatchCPU,
		},
		{
			name: "a batch pod assigned after the last report counts against reclaimable cpu", metric: fresh(2000, 8*gi),
			pods: []testPod{batchPod("be1", "n1", "2500", "1Gi")},
			pod:  batchPod("new", "", "1000", "1Gi"), want: ReasonBatchCPU,
		},
		{
			name: "a service pod assigned after the last report takes from reclaimable cpu", metric: fresh(2000, 8*gi),
			pods: []testPod{lsPod("ls", "n1", "2500m", "1Gi")},
			pod:  batchPod("new", "", "1000", "1Gi"), want: ReasonBatchCPU,
		},
		{
			name: "a reported service pod is already out of reclaimable cpu", metric: fresh(2000, 8*gi),
			pods: []testPod{withRunning(lsPod("ls", "n1", "2500m", "1Gi"), time.Hour)},
			pod:  batchPod("new", "", "1000", "1Gi"),
		},
		{
			name: "batch memory too small", metric: fresh(2000, 8*gi),
			pod: batchPod("new", "", "100", "9Gi"), want: ReasonBatchMemory,
		},
		{
			name: "allocatable zeroed by a degraded reporter wins over the metric", node: &testNode{name: "n1", batchCPU: 0, batchMemory: 0},
			metric: fresh(2000, 8*gi), pod: batchPod("new", "", "100", "1Gi"), want: ReasonBatchCPU,
		},
		{
			name: "DaemonSet pod ignores load and metric age", metric: &nodeMetricArgs{age: time.Hour, cpu: 7900, memory: 8 * gi},
			pod: testPod{name: "ds", daemonSet: true, requests: lsPod("", "", "100m", "100Mi").requests},
		},
		{
			name: "system-critical pod ignores load and metric age", metric: &nodeMetricArgs{age: time.Hour, cpu: 7900, memory: 8 * gi},
			pod: testPod{name: "webhook", priority: ptrInt32(2000000000), requests: lsPod("", "", "50m", "64Mi").requests},
		},
		{
			name: "high but not system priority is judged by load", metric: fresh(7900, 8*gi),
			pod: testPod{name: "prod", priority: ptrInt32(1999999999), requests: lsPod("", "", "50m", "64Mi").requests}, want: ReasonCPUUsage,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			n := testNode{name: "n1", batchCPU: 4000, batchMemory: 16 * gi}
			if tt.node != nil {
				n = *tt.node
			}
			if tt.metric != nil {
				n.metric = tt.metric.build()
			}
			c := cacheWith(t, cfg, []testNode{n}, tt.pods)
			states := make([]*nodeState, 1)
			c.lookup([]string{"n1"}, states)
			got := cfg.filterNode(states[0], "n1", demandOf(tt.pod.build(), cfg.DefaultEstimatedUsage), nil, testNow)
			if got != tt.want {
				detail := ""
				if got != "" {
					detail = cfg.explain(got, states[0], demandOf(tt.pod.build(), cfg.DefaultEstimatedUsage), nil, testNow)
				}
				t.Fatalf("filterNode() = %q (%s), want %q", got, detail, tt.want)
			}
		})
	}
}

type nodeMetricArgs struct {
	age                       time.Duration
	cpu, memory               int64
	reclaimCPU, reclaimMemory int64
}

func (a *nodeMetricArgs) build() *nodemetric.NodeMetric {
	return metricAt(a.age, a.cpu, a.memory, a.cpu/2, a.memory/2, a.reclaimCPU, a.reclaimMemory)
}

func withRunning(p testPod, d time.Duration) testPod {
	p.runningFor = d
	return p
}

func TestScoreNode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		weights ResourceWeights
		nodes   []testNode
		pods    []testPod
		pod     testPod
		want    map[string]int64
	}{
		{
			name: "least loaded first",
			nodes: []testNode{
				{name: "idle", metric: metricAt(time.Minute, 0, 0, 0, 0, 0, 0)},
				{name: "quarter", metric: metricAt(time.Minute, 2000, 8*gi, 0, 0, 0, 0)},
				{name: "busy", metric: metricAt(time.Minute, 7000, 28*gi, 0, 0, 0, 0)},
			},
			// cpu (8000-2000-250)/8000 = 0.72, memory (32Gi-8Gi-200Mi)/32Gi = 0.74: 7.
			pod:  testPod{name: "new"},
			want: map[string]int64{"idle": 9, "quarter": 7, "busy": 1},
		},
		{
			name: "a burst of pods since the report makes a cold node look warm",
			nodes: []testNode{
				{name: "cold", metric: metricAt(time.Minute, 1000, 4*gi, 0, 0, 0, 0)},
				{name: "warm", metric: metricAt(time.Minute, 3000, 12*gi, 0, 0, 0, 0)},
			},
			pods: []testPod{
				lsPod("p1", "cold", "1", "2Gi"), lsPod("p2", "cold", "1", "2Gi"),
				lsPod("p3", "cold", "1", "2Gi"), lsPod("p4", "cold", "1", "2Gi"),
			},
			pod: lsPod("new", "", "500m", "1Gi"),
			// cold: cpu (8000-1000-4000-500)/8000, memory (32-4-8-1)/32 → 4; warm: 3500m and 13Gi used → 5.
			want: map[string]int64{"cold": 4, "warm": 5},
		},
		{
			name:    "cpu weight only",
			weights: ResourceWeights{CPU: 1},
			nodes: []testNode{
				{name: "cpu-free", metric: metricAt(time.Minute, 0, 30*gi, 0, 0, 0, 0)},
				{name: "mem-free", metric: metricAt(time.Minute, 7000, 0, 0, 0, 0, 0)},
			},
			pod:  lsPod("new", "", "800m", "1Gi"),
			want: map[string]int64{"cpu-free": 9, "mem-free": 0},
		},
		{
			name:  "stale, missing and unknown nodes score the minimum",
			nodes: []testNode{{name: "stale", metric: metricAt(time.Hour, 0, 0, 0, 0, 0, 0)}, {name: "missing"}},
			pod:   testPod{name: "new"},
			want:  map[string]int64{"stale": 0, "missing": 0, "unknown": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			if tt.weights != (ResourceWeights{}) {
				cfg.ResourceWeights = tt.weights
			}
			for i := range tt.nodes {
				tt.nodes[i].batchCPU = -1
			}
			c := cacheWith(t, cfg, tt.nodes, tt.pods)
			d := demandOf(tt.pod.build(), cfg.DefaultEstimatedUsage)
			for name, want := range tt.want {
				states := make([]*nodeState, 1)
				c.lookup([]string{name}, states)
				if got := cfg.scoreNode(states[0], name, d, nil, testNow); got != want {
					t.Errorf("scoreNode(%s) = %d, want %d", name, got, want)
				}
			}
		})
	}
}
