package slo

import (
	"reflect"
	"testing"
	"time"

	"github.com/tandemkit/tandem/resource/qos"
)

// TestSeed004ForNode is the operator's view: what each knob is on an Anolis node, which the operator's
// nodeStrategies select, and on any other node.
func TestSeed004ForNode(t *testing.T) {
	_, data := seed004(t)
	cfg := Parse(data)
	anolis, err := cfg.ForNode(map[string]string{"kubernetes.io/kernel": "anolis", "kubernetes.io/os": "linux"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := cfg.ForNode(map[string]string{"kubernetes.io/kernel": "ubuntu", "kubernetes.io/os": "linux"})
	if err != nil {
		t.Fatal(err)
	}

	knobs := []struct {
		knob          string
		get           func(Resolved) any
		anolis, other any
	}{
		// colocation-config: nodeConfigs "anolis" overrides two fields.
		{"colocation.enable", func(r Resolved) any { return r.Colocation.Enable }, false, false},
		{"colocation.metricAggregateDurationSeconds", func(r Resolved) any { return r.Colocation.MetricAggregateDurationSeconds }, int64(300), int64(300)},
		{"colocation.metricReportIntervalSeconds", func(r Resolved) any { return r.Colocation.MetricReportIntervalSeconds }, int64(60), int64(60)},
		{"colocation.metricAggregatePolicy.durations", func(r Resolved) any { return durations(r) },
			[]time.Duration{5 * time.Minute, 10 * time.Minute, 15 * time.Minute}, []time.Duration{5 * time.Minute, 10 * time.Minute, 15 * time.Minute}},
		{"colocation.cpuReclaimThresholdPercent", func(r Resolved) any { return r.Colocation.CPUReclaimThresholdPercent }, int64(60), int64(60)},
		{"colocation.memoryReclaimThresholdPercent", func(r Resolved) any { return r.Colocation.MemoryReclaimThresholdPercent }, int64(65), int64(65)},
		{"colocation.memoryCalculatePolicy", func(r Resolved) any { return r.Colocation.MemoryCalculatePolicy }, CalculateByPodUsage, CalculateByPodUsage},
		{"colocation.degradeTimeMinutes", func(r Resolved) any { return r.Colocation.DegradeTimeMinutes }, int64(15), int64(15)},
		{"colocation.updateTimeThresholdSeconds", func(r Resolved) any { return r.Colocation.UpdateTimeThresholdSeconds }, int64(360), int64(300)},
		{"colocation.resourceDiffThreshold", func(r Resolved) any { return r.Colocation.ResourceDiffThreshold }, 0.2, 0.1},
		{"colocation.batchCPUThresholdPercent (unset: no cap)", func(r Resolved) any { return r.Colocation.BatchCPUThresholdPercent }, int64(100), int64(100)},

		// resource-threshold-config: the anolis strategy lowers only the BE usage threshold.
		{"threshold.enable", func(r Resolved) any { return r.ResourceThreshold.Enable }, false, false},
		{"threshold.cpuSuppressThresholdPercent", func(r Resolved) any { return r.ResourceThreshold.CPUSuppressThresholdPercent }, int64(65), int64(65)},
		{"threshold.cpuSuppressPolicy", func(r Resolved) any { return r.ResourceThreshold.CPUSuppressPolicy }, CPUSuppressByCPUSet, CPUSuppressByCPUSet},
		{"threshold.memoryEvictThresholdPercent", func(r Resolved) any { return r.ResourceThreshold.MemoryEvictThresholdPercent }, int64(70), int64(70)},
		{"threshold.memoryEvictLowerPercent", func(r Resolved) any { return r.ResourceThreshold.MemoryEvictLowerPercent }, int64(65), int64(65)},
		{"threshold.cpuEvictBySatisfaction", func(r Resolved) any { return r.ResourceThreshold.CPUEvictBySatisfaction }, true, true},
		{"threshold.cpuEvictBESatisfactionUpperPercent", func(r Resolved) any { return r.ResourceThreshold.CPUEvictBESatisfactionUpperPercent }, int64(90), int64(90)},
		{"threshold.cpuEvictBESatisfactionLowerPercent", func(r Resolved) any { return r.ResourceThreshold.CPUEvictBESatisfactionLowerPercent }, int64(60), int64(60)},
		{"threshold.cpuEvictBEUsageThresholdPercent", func(r Resolved) any { return r.ResourceThreshold.CPUEvictBEUsageThresholdPercent }, int64(80), int64(90)},
		{"threshold.cpuEvictTimeWindowSeconds (unset)", func(r Resolved) any { return r.ResourceThreshold.CPUEvictTimeWindowSeconds }, int64(0), int64(0)},
		{"threshold.cpuEvictPolicy (default)", func(r Resolved) any { return r.ResourceThreshold.CPUEvictPolicy }, EvictByRealLimit, EvictByRealLimit},
		{"threshold.stealHeadroom (Tandem's; auto by default)", func(r Resolved) any { return r.ResourceThreshold.StealHeadroom }, StealHeadroomAuto, StealHeadroomAuto},
		{"threshold.stealThresholdPercent (Tandem's)", func(r Resolved) any { return r.ResourceThreshold.StealThresholdPercent }, int64(5), int64(5)},
		{"threshold.lsWaitGuard (Tandem's; off by default)", func(r Resolved) any { return r.ResourceThreshold.LSWaitGuard }, false, false},
		{"threshold.lsWaitThresholdMicros (Tandem's)", func(r Resolved) any { return r.ResourceThreshold.LSWaitThresholdMicros }, int64(4000), int64(4000)},

		// resource-qos-config: the anolis strategy sets only beClass.memoryQOS.wmarkRatio.
		{"qos.policies.cpuPolicy (default)", func(r Resolved) any { return r.ResourceQOS.Policies.CPUPolicy }, CPUQOSPolicyGroupIdentity, CPUQOSPolicyGroupIdentity},
		{"qos.lsrClass.cpuQOS.enable", func(r Resolved) any { return r.ResourceQOS.LSR.CPUQOS.Enable }, false, false},
		{"qos.lsrClass.cpuQOS.groupIdentity", func(r Resolved) any { return r.ResourceQOS.LSR.CPUQOS.GroupIdentity }, int64(2), int64(2)},
		{"qos.lsClass.cpuQOS.groupIdentity", func(r Resolved) any { return r.ResourceQOS.LS.CPUQOS.GroupIdentity }, int64(2), int64(2)},
		{"qos.beClass.cpuQOS.groupIdentity", func(r Resolved) any { return r.ResourceQOS.BE.CPUQOS.GroupIdentity }, int64(-1), int64(-1)},
		{"qos.beClass.cpuQOS.yieldThreads (off by default: docs/colocation.md)", func(r Resolved) any { return r.ResourceQOS.BE.CPUQOS.YieldThreads }, false, false},
		{"qos.lsClass.cpuQOS.yieldThreads", func(r Resolved) any { return r.ResourceQOS.LS.CPUQOS.YieldThreads }, false, false},
		{"qos.lsrClass.memoryQOS.wmarkRatio", func(r Resolved) any { return r.ResourceQOS.LSR.MemoryQOS.WmarkRatio }, int64(95), int64(95)},
		{"qos.lsClass.memoryQOS.wmarkRatio", func(r Resolved) any { return r.ResourceQOS.LS.MemoryQOS.WmarkRatio }, int64(95), int64(95)},
		{"qos.beClass.memoryQOS.wmarkRatio", func(r Resolved) any { return r.ResourceQOS.BE.MemoryQOS.WmarkRatio }, int64(90), int64(95)},
		{"qos.beClass.memoryQOS.wmarkScalePermill", func(r Resolved) any { return r.ResourceQOS.BE.MemoryQOS.WmarkScalePermill }, int64(20), int64(20)},
		{"qos.beClass.memoryQOS.wmarkMinAdj", func(r Resolved) any { return r.ResourceQOS.BE.MemoryQOS.WmarkMinAdj }, int64(50), int64(50)},
		{"qos.lsClass.memoryQOS.wmarkMinAdj", func(r Resolved) any { return r.ResourceQOS.LS.MemoryQOS.WmarkMinAdj }, int64(-25), int64(-25)},
		{"qos.beClass.memoryQOS.enable", func(r Resolved) any { return r.ResourceQOS.BE.MemoryQOS.Enable }, false, false},
		{"qos.lsClass.memoryQOS.throttlingPercent", func(r Resolved) any { return r.ResourceQOS.LS.MemoryQOS.ThrottlingPercent }, int64(0), int64(0)},
		{"qos.beClass.resctrlQOS.catRangeEndPercent", func(r Resolved) any { return r.ResourceQOS.BE.ResctrlQOS.CatRangeEndPercent }, int64(30), int64(30)},
		{"qos.lsClass.resctrlQOS.catRangeEndPercent", func(r Resolved) any { return r.ResourceQOS.LS.ResctrlQOS.CatRangeEndPercent }, int64(100), int64(100)},
		{"qos.lsrClass.resctrlQOS.mbaPercent", func(r Resolved) any { return r.ResourceQOS.LSR.ResctrlQOS.MBAPercent }, int64(100), int64(100)},

		// cpu-burst-config: the anolis strategy switches to cfs-quota burst with a higher ceiling.
		{"burst.policy", func(r Resolved) any { return r.CPUBurst.Policy }, CFSQuotaBurstOnly, CPUBurstNone},
		{"burst.cpuBurstPercent", func(r Resolved) any { return r.CPUBurst.CPUBurstPercent }, int64(1000), int64(1000)},
		{"burst.cfsQuotaBurstPercent", func(r Resolved) any { return r.CPUBurst.CFSQuotaBurstPercent }, int64(400), int64(300)},
		{"burst.cfsQuotaBurstPeriodSeconds", func(r Resolved) any { return r.CPUBurst.CFSQuotaBurstPeriodSeconds }, int64(-1), int64(-1)},
		{"burst.sharePoolThresholdPercent", func(r Resolved) any { return r.CPUBurst.SharePoolThresholdPercent }, int64(50), int64(50)},

		// system-config lacks a comma and is refused, as Koordinator refuses it: Koordinator's defaults,
		// which leave every sysctl alone.
		{"system.minFreeKbytesFactor (unset)", func(r Resolved) any { return r.System.MinFreeKbytesFactor == nil }, true, true},
		{"system.watermarkScaleFactor (unset)", func(r Resolved) any { return r.System.WatermarkScaleFactor == nil }, true, true},
		{"system.memcgReapBackGround (unset)", func(r Resolved) any { return r.System.MemcgReapBackGround == nil }, true, true},
	}
	for _, k := range knobs {
		t.Run(k.knob, func(t *testing.T) {
			if got := k.get(anolis); !reflect.DeepEqual(got, k.anolis) {
				t.Errorf("anolis node: %v (%T), want %v (%T)", got, got, k.anolis, k.anolis)
			}
			if got := k.get(other); !reflect.DeepEqual(got, k.other) {
				t.Errorf("other node: %v (%T), want %v (%T)", got, got, k.other, k.other)
			}
		})
	}

	wantMatches := []NodeMatch{
		{Section: ColocationConfigKey, Applied: "anolis"},
		{Section: ResourceThresholdConfigKey, Applied: "anolis"},
		{Section: ResourceQOSConfigKey, Applied: "anolis"},
		{Section: CPUBurstConfigKey, Applied: "anolis"},
		// system-config was refused: no strategy of it applies.
	}
	if !reflect.DeepEqual(anolis.Matches, wantMatches) {
		t.Errorf("anolis matches = %+v, want %+v", anolis.Matches, wantMatches)
	}
	if len(other.Matches) != 0 {
		t.Errorf("other node matches = %+v, want none", other.Matches)
	}
}

func TestForNodeDefaults(t *testing.T) {
	var nilConfig *Config
	fromNil, err := nilConfig.ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	fromEmpty, err := (&Config{}).ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	fromDefault, err := DefaultConfig().ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromEmpty, fromDefault) || !reflect.DeepEqual(fromNil, fromDefault) {
		t.Errorf("missing sections do not resolve to DefaultConfig:\nempty   %+v\ndefault %+v", fromEmpty, fromDefault)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig does not validate: %v", err)
	}
	// Spot-check Koordinator's documented defaults.
	r := fromDefault
	if r.ResourceThreshold.CPUSuppressThresholdPercent != 65 || r.ResourceThreshold.MemoryEvictThresholdPercent != 70 ||
		r.ResourceThreshold.MemoryEvictLowerPercent != 68 || r.ResourceThreshold.CPUEvictBySatisfaction {
		t.Errorf("threshold defaults = %+v", r.ResourceThreshold)
	}
	if r.CPUBurst != (CPUBurstSettings{Policy: CPUBurstNone, CPUBurstPercent: 100, CFSQuotaBurstPercent: 300, CFSQuotaBurstPeriodSeconds: -1, SharePoolThresholdPercent: 50}) {
		t.Errorf("cpu burst defaults = %+v", r.CPUBurst)
	}
	if r.ResourceQOS.BE.ResctrlQOS.CatRangeEndPercent != 30 || r.ResourceQOS.BE.MemoryQOS.WmarkMinAdj != 50 || r.ResourceQOS.LSR.CPUQOS.GroupIdentity != 2 {
		t.Errorf("qos defaults = %+v", r.ResourceQOS)
	}
	if s := r.System; s.MinFreeKbytesFactor != nil || s.WatermarkScaleFactor != nil || s.MemcgReapBackGround != nil {
		t.Errorf("system defaults set a sysctl nobody asked for: %+v", s)
	}
}

func TestForNodeSelectors(t *testing.T) {
	cfg, err := ParseFile([]byte(`
cpu-burst-config:
  clusterStrategy: {policy: none, cfsQuotaBurstPercent: 300}
  nodeStrategies:
  - name: big-anolis
    nodeSelector:
      matchLabels: {kubernetes.io/kernel: anolis}
      matchExpressions:
      - {key: node.tandem.io/size, operator: In, values: [large, xlarge]}
    policy: auto
  - name: anolis
    nodeSelector:
      matchLabels: {kubernetes.io/kernel: anolis}
    policy: cfsQuotaBurstOnly
  - name: not-gpu
    nodeSelector:
      matchExpressions:
      - {key: gpu, operator: DoesNotExist}
    cfsQuotaBurstPercent: 500
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		labels      map[string]string
		wantPolicy  CPUBurstPolicy
		wantPercent int64
		wantMatch   []NodeMatch
	}{
		{
			name:        "first match wins; later matches are reported, not merged",
			labels:      map[string]string{"kubernetes.io/kernel": "anolis", "node.tandem.io/size": "large"},
			wantPolicy:  CPUBurstAuto,
			wantPercent: 300,
			wantMatch:   []NodeMatch{{Section: CPUBurstConfigKey, Applied: "big-anolis", Ignored: []string{"anolis", "not-gpu"}}},
		},
		{
			name:        "matchExpressions that do not hold skip the strategy",
			labels:      map[string]string{"kubernetes.io/kernel": "anolis", "node.tandem.io/size": "small", "gpu": "a100"},
			wantPolicy:  CFSQuotaBurstOnly,
			wantPercent: 300,
			wantMatch:   []NodeMatch{{Section: CPUBurstConfigKey, Applied: "anolis"}},
		},
		{
			name:        "DoesNotExist matches a node without the label",
			labels:      map[string]string{"kubernetes.io/kernel": "ubuntu"},
			wantPolicy:  CPUBurstNone,
			wantPercent: 500,
			wantMatch:   []NodeMatch{{Section: CPUBurstConfigKey, Applied: "not-gpu"}},
		},
		{
			name:        "no strategy matches: the cluster strategy",
			labels:      map[string]string{"gpu": "a100"},
			wantPolicy:  CPUBurstNone,
			wantPercent: 300,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := cfg.ForNode(tt.labels)
			if err != nil {
				t.Fatal(err)
			}
			if r.CPUBurst.Policy != tt.wantPolicy || r.CPUBurst.CFSQuotaBurstPercent != tt.wantPercent {
				t.Errorf("cpu burst = %+v, want policy %s and cfsQuotaBurstPercent %d", r.CPUBurst, tt.wantPolicy, tt.wantPercent)
			}
			if !reflect.DeepEqual(r.Matches, tt.wantMatch) {
				t.Errorf("matches = %+v, want %+v", r.Matches, tt.wantMatch)
			}
		})
	}
}

func TestForNodeMerge(t *testing.T) {
	cfg, err := ParseFile([]byte(`
colocation-config:
  metricAggregatePolicy: {durations: [1m, 2m, 3m]}
  nodeConfigs:
  - name: short
    nodeSelector: {matchLabels: {pool: a}}
    metricAggregatePolicy: {durations: [10m]}
resource-threshold-config:
  clusterStrategy: {enable: true, memoryEvictThresholdPercent: 80, memoryEvictLowerPercent: 75, cpuSuppressPolicy: cfsQuota}
  nodeStrategies:
  - name: a
    nodeSelector: {matchLabels: {pool: a}}
    memoryEvictThresholdPercent: 90
system-config:
  clusterStrategy: {schedFeatures: {ID_ABSOLUTE_EXPEL: true, ID_LOAD_BALANCE: false}}
  nodeStrategies:
  - name: a
    nodeSelector: {matchLabels: {pool: a}}
    schedFeatures: {ID_LOAD_BALANCE: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := cfg.ForNode(map[string]string{"pool": "a"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := durations(r), []time.Duration{10 * time.Minute}; !reflect.DeepEqual(got, want) {
		t.Errorf("durations = %v, want the node's list %v replacing the cluster's", got, want)
	}
	th := r.ResourceThreshold
	if !th.Enable || th.MemoryEvictThresholdPercent != 90 || th.MemoryEvictLowerPercent != 75 || th.CPUSuppressPolicy != CPUSuppressByCFSQuota {
		t.Errorf("threshold = %+v, want the node's threshold 90 over the cluster's enable, lower 75 and cfsQuota", th)
	}
	if got, want := r.System.SchedFeatures, map[string]bool{"ID_ABSOLUTE_EXPEL": true, "ID_LOAD_BALANCE": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("schedFeatures = %v, want maps merged key by key %v", got, want)
	}

	// Resolved shares nothing with the Config: a policy that scribbles on its copy changes nobody else's.
	r.System.SchedFeatures["ID_ABSOLUTE_EXPEL"] = false
	r.Colocation.MetricAggregatePolicy.Durations[0].Duration = time.Hour
	again, err := cfg.ForNode(map[string]string{"pool": "a"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.System.SchedFeatures["ID_ABSOLUTE_EXPEL"] || durations(again)[0] != 10*time.Minute {
		t.Errorf("changing a Resolved changed the Config: %+v", again)
	}
}

func TestClass(t *testing.T) {
	q := ResourceQOSSettings{
		LSR:    ClassSettings{CPUQOS: CPUQOSSettings{GroupIdentity: 2}},
		LS:     ClassSettings{CPUQOS: CPUQOSSettings{GroupIdentity: 1}},
		BE:     ClassSettings{CPUQOS: CPUQOSSettings{GroupIdentity: -1}},
		System: ClassSettings{CPUQOS: CPUQOSSettings{SchedIdle: 1}},
	}
	tests := []struct {
		class  qos.Class
		want   ClassSettings
		wantOK bool
	}{
		{"LSE", q.LSR, true},
		{"LSR", q.LSR, true},
		{"LS", q.LS, true},
		{"be", q.BE, true},
		{"SYSTEM", q.System, true},
		{"Guaranteed", ClassSettings{}, false},
		{"", ClassSettings{}, false},
	}
	for _, tt := range tests {
		got, ok := q.Class(tt.class)
		if !reflect.DeepEqual(got, tt.want) || ok != tt.wantOK {
			t.Errorf("Class(%q) = %+v, %v; want %+v, %v", tt.class, got, ok, tt.want, tt.wantOK)
		}
	}
}

// durations is colocation-config's metricAggregatePolicy.durations as time.Durations.
func durations(r Resolved) []time.Duration {
	var out []time.Duration
	for _, d := range r.Colocation.MetricAggregatePolicy.Durations {
		out = append(out, d.Duration)
	}
	return out
}

func TestForNodeRejectsBadSelector(t *testing.T) {
	// Parse refuses such a section (Validate checks selectors); ForNode must still not apply one that was
	// built another way.
	cfg := &Config{}
	if err := cfg.decodeSection(ResourceQOSConfigKey, []byte(`{"nodeStrategies": [{"name": "bad", "nodeSelector":
		{"matchExpressions": [{"key": "kubernetes.io/kernel", "operator": "Like", "values": ["anolis"]}]}}]}`)); err != nil {
		t.Fatal(err)
	}
	if refused := Parse(map[string]string{ResourceQOSConfigKey: `{"nodeStrategies": [{"name": "bad", "nodeSelector":
		{"matchExpressions": [{"key": "kubernetes.io/kernel", "operator": "Like", "values": ["anolis"]}]}}]}`}).Refused(); len(refused) != 1 {
		t.Errorf("Parse refused %v, want the resource-qos-config section", refused)
	}
	_, err := cfg.ForNode(map[string]string{"kubernetes.io/kernel": "anolis"})
	if err == nil {
		t.Fatal("ForNode accepted a selector with operator Like")
	}
	if want := "resource-qos-config.nodeStrategies[0].nodeSelector: "; !contains(err, want) {
		t.Errorf("error %q does not name %q", err, want)
	}
}
