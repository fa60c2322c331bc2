package slo

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// fieldErrors returns the joined errors as "path: message" lines, in order.
func fieldErrors(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate returned %T, want joined errors", err)
	}
	var out []string
	for _, e := range joined.Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		out = append(out, fe.Error())
	}
	return out
}

func TestValidate(t *testing.T) {
	const anolis = `"name": "anolis", "nodeSelector": {"matchLabels": {"kubernetes.io/kernel": "anolis"}}`
	tests := []struct {
		name string
		data map[string]string
		// want lists the errors in order; an entry ending in * matches by prefix.
		want []string
	}{
		{
			name: "percentage above 100 in the cluster strategy",
			data: map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"cpuSuppressThresholdPercent": 120}}`},
			want: []string{"resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent: 120 is not a percentage; use 0 to 100"},
		},
		{
			name: "steal headroom mode misspelt",
			data: map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"stealHeadroom": "yes", "stealThresholdPercent": 101, "beCFSPeriodMicros": 2000000, "lsWaitThresholdMicros": 0}}`},
			want: []string{"resource-threshold-config.clusterStrategy.stealHeadroom: *", "resource-threshold-config.clusterStrategy.stealThresholdPercent: 101 is not a percentage; use 0 to 100",
				"resource-threshold-config.clusterStrategy.beCFSPeriodMicros: *", "resource-threshold-config.clusterStrategy.lsWaitThresholdMicros: *"},
		},
		{
			name: "yielding threads for a latency-sensitive class",
			data: map[string]string{ResourceQOSConfigKey: `{"clusterStrategy": {"lsClass": {"cpuQOS": {"yieldThreads": true}}, "beClass": {"cpuQOS": {"yieldThreads": false}}}}`},
			want: []string{"resource-qos-config.clusterStrategy.lsClass.cpuQOS.yieldThreads: true is for beClass only: it makes the class's threads yield to every other thread on the node; remove it"},
		},
		{
			name: "negative percentage in a node strategy",
			data: map[string]string{ResourceQOSConfigKey: `{"nodeStrategies": [{` + anolis + `, "beClass": {"resctrlQOS": {"mbaPercent": -5}}}]}`},
			want: []string{"resource-qos-config.nodeStrategies[0].beClass.resctrlQOS.mbaPercent: -5 is not a percentage; use 0 to 100"},
		},
		{
			name: "every bad knob is reported",
			data: map[string]string{
				ResourceQOSConfigKey: `{"clusterStrategy": {"lsClass": {"cpuQOS": {"groupIdentity": 3},
					"memoryQOS": {"wmarkRatio": 101, "wmarkScalePermill": 0, "wmarkMinAdj": -30, "priority": 13, "oomKillGroup": 2}}}}`,
				CPUBurstConfigKey: `{"clusterStrategy": {"policy": "always", "cpuBurstPercent": 0, "cfsQuotaBurstPercent": 50,
					"cfsQuotaBurstPeriodSeconds": -2, "sharePoolThresholdPercent": 101}}`,
				SystemConfigKey: `{"clusterStrategy": {"minFreeKbytesFactor": 0, "watermarkScaleFactor": 500, "memcgReapBackGround": 2}}`,
			},
			want: []string{
				"resource-qos-config.clusterStrategy.lsClass.cpuQOS.groupIdentity: 3 is out of range; use -1 to 2",
				"resource-qos-config.clusterStrategy.lsClass.memoryQOS.wmarkRatio: 101 is not a percentage; use 0 to 100",
				"resource-qos-config.clusterStrategy.lsClass.memoryQOS.wmarkScalePermill: 0 is out of range; use 1 to 1000",
				"resource-qos-config.clusterStrategy.lsClass.memoryQOS.wmarkMinAdj: -30 is out of range; use -25 to 50",
				"resource-qos-config.clusterStrategy.lsClass.memoryQOS.priority: 13 is out of range; use 0 to 12",
				"resource-qos-config.clusterStrategy.lsClass.memoryQOS.oomKillGroup: 2 is out of range; use 0 to 1",
				`cpu-burst-config.clusterStrategy.policy: "always" is not supported; use one of none, cpuBurstOnly, cfsQuotaBurstOnly, auto`,
				"cpu-burst-config.clusterStrategy.cpuBurstPercent: 0 is out of range; use 1 to 10000",
				"cpu-burst-config.clusterStrategy.cfsQuotaBurstPercent: 50 is too small; use at least 100",
				"cpu-burst-config.clusterStrategy.cfsQuotaBurstPeriodSeconds: -2 is too small; use at least -1",
				"cpu-burst-config.clusterStrategy.sharePoolThresholdPercent: 101 is not a percentage; use 0 to 100",
				"system-config.clusterStrategy.minFreeKbytesFactor: 0 is too small; use at least 1",
				"system-config.clusterStrategy.watermarkScaleFactor: 500 is out of range; use 1 to 400",
				"system-config.clusterStrategy.memcgReapBackGround: 2 is out of range; use 0 to 1",
			},
		},
		{
			name: "colocation values",
			data: map[string]string{ColocationConfigKey: `{"metricReportIntervalSeconds": 0, "resourceDiffThreshold": 1.5,
				"memoryCalculatePolicy": "peak", "midCPUThresholdPercent": 150, "metricAggregatePolicy": {"durations": ["-5m"]},
				"nodeConfigs": [{` + anolis + `, "degradeTimeMinutes": 0}]}`},
			want: []string{
				"colocation-config.metricReportIntervalSeconds: 0 is too small; use at least 1",
				"colocation-config.metricAggregatePolicy.durations[0]: -5m0s is not a positive duration; use e.g. 5m",
				`colocation-config.memoryCalculatePolicy: "peak" is not supported; use one of usage, request, maxUsageRequest`,
				"colocation-config.resourceDiffThreshold: 1.5 is out of range; use a fraction above 0 and at most 1",
				"colocation-config.midCPUThresholdPercent: 150 is not a percentage; use 0 to 100",
				"colocation-config.nodeConfigs[0].degradeTimeMinutes: 0 is too small; use at least 1",
			},
		},
		{
			name: "lower bound not below upper bound, within the cluster strategy",
			data: map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"memoryEvictThresholdPercent": 60, "memoryEvictLowerPercent": 65},
				"nodeStrategies": [{` + anolis + `, "cpuSuppressThresholdPercent": 50}]}`},
			// Reported once, where it was written, not again for the node strategy that inherits it.
			want: []string{"resource-threshold-config.clusterStrategy.memoryEvictLowerPercent: 65 must be below memoryEvictThresholdPercent (60); lower it or raise memoryEvictThresholdPercent"},
		},
		{
			name: "node strategy breaks a relation with a value it inherits",
			data: map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"cpuEvictBESatisfactionLowerPercent": 60, "cpuEvictBESatisfactionUpperPercent": 90},
				"nodeStrategies": [{` + anolis + `, "cpuEvictBESatisfactionUpperPercent": 50}]}`},
			want: []string{"resource-threshold-config.nodeStrategies[0].cpuEvictBESatisfactionLowerPercent: 60 must be below cpuEvictBESatisfactionUpperPercent (50); lower it or raise cpuEvictBESatisfactionUpperPercent"},
		},
		{
			name: "CAT range empty after the node strategy narrows it",
			data: map[string]string{ResourceQOSConfigKey: `{"nodeStrategies": [{` + anolis + `, "beClass": {"resctrlQOS": {"catRangeStartPercent": 30}}}]}`},
			want: []string{"resource-qos-config.nodeStrategies[0].beClass.resctrlQOS.catRangeStartPercent: 30 must be below catRangeEndPercent (30); lower it or raise catRangeEndPercent"},
		},
		{
			name: "node profiles",
			data: map[string]string{CPUBurstConfigKey: `{"nodeStrategies": [
				{"nodeSelector": {"matchLabels": {"a": "b"}}},
				{"name": "x", "nodeSelector": {"matchLabels": {"c": "d"}}},
				{"name": "x", "nodeSelector": {}},
				{"name": "y"},
				{"name": "z", "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "In"}]}},
				{"name": "w", "nodeSelector": {"matchLabels": {"bad key!": "v"}}}]}`},
			want: []string{
				"cpu-burst-config.nodeStrategies[0].name: missing; name every node strategy so logs can say which one applied",
				`cpu-burst-config.nodeStrategies[2].name: "x" is also the name of cpu-burst-config.nodeStrategies[1]; use unique names`,
				"cpu-burst-config.nodeStrategies[2].nodeSelector: missing or empty; set matchLabels or matchExpressions (an empty selector would match every node)",
				"cpu-burst-config.nodeStrategies[3].nodeSelector: missing or empty; set matchLabels or matchExpressions (an empty selector would match every node)",
				// apimachinery words these; only their start is Tandem's.
				"cpu-burst-config.nodeStrategies[4].nodeSelector: values: Invalid value*",
				`cpu-burst-config.nodeStrategies[5].nodeSelector: key: Invalid value: "bad key!"*`,
			},
		},
		{
			name: "network bandwidth as percentage or quantity",
			data: map[string]string{ResourceQOSConfigKey: `{"clusterStrategy": {"beClass": {"networkQOS": {"enable": true,
				"ingressRequest": 150, "ingressLimit": "50M", "egressLimit": "fast"}}}}`},
			want: []string{
				"resource-qos-config.clusterStrategy.beClass.networkQOS.ingressRequest: 150 is not a percentage; use 0 to 100",
				`resource-qos-config.clusterStrategy.beClass.networkQOS.egressLimit: "fast" is neither a percentage nor a quantity such as 50M`,
			},
		},
		{
			name: "valid values at the edges",
			data: map[string]string{
				ResourceQOSConfigKey: `{"clusterStrategy": {"beClass": {"cpuQOS": {"groupIdentity": -1}, "memoryQOS": {"wmarkRatio": 100, "wmarkMinAdj": -25, "wmarkScalePermill": 1000},
					"resctrlQOS": {"catRangeStartPercent": 0, "catRangeEndPercent": 1, "mbaPercent": 0}}}}`,
				CPUBurstConfigKey: `{"clusterStrategy": {"cpuBurstPercent": 10000, "cfsQuotaBurstPercent": 100, "cfsQuotaBurstPeriodSeconds": -1}}`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Decode without Parse's validation, to see every error Validate reports at once.
			cfg := &Config{}
			for key, text := range tt.data {
				if err := cfg.decodeText(key, []byte(text)); err != nil {
					t.Fatalf("decode %s = %v", key, err)
				}
			}
			got := fieldErrors(t, cfg.Validate())
			if !slices.EqualFunc(got, tt.want, matches) {
				t.Errorf("Validate:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func matches(got, want string) bool {
	if prefix, ok := strings.CutSuffix(want, "*"); ok {
		return strings.HasPrefix(got, prefix)
	}
	return got == want
}

func TestValidateNil(t *testing.T) {
	var c *Config
	if err := c.Validate(); err != nil {
		t.Errorf("nil Config (all defaults) = %v, want valid", err)
	}
}
