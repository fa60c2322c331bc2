package slo

import (
	"strings"
	"testing"
)

// TestParseRefusesPerSection: each bad section is refused alone, named; the others apply; KeepLastGood
// gives a refused section its last good value, and defaults when there is none.
func TestParseRefusesPerSection(t *testing.T) {
	anolis := map[string]string{"kubernetes.io/kernel": "anolis"}
	good := map[string]string{
		CPUBurstConfigKey:          `{"clusterStrategy": {"policy": "auto", "cpuBurstPercent": 300}}`,
		ResourceThresholdConfigKey: `{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 60}}`,
		ColocationConfigKey:        `{"enable": true}`,
	}
	last := Parse(good)
	if err := refusals(last); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// change replaces keys of good (an empty value removes the key).
		change map[string]string
		// last is the configuration in force; nil is a first start.
		last        *Config
		wantRefused []string // "key: substring of the error"
		check       func(t *testing.T, r Resolved)
	}{
		{
			name:        "typo in one section keeps its last good value, the others change",
			change:      map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {"polcy": "none"}}`, ColocationConfigKey: `{"enable": false}`},
			last:        last,
			wantRefused: []string{"cpu-burst-config: cpu-burst-config.clusterStrategy.polcy: unknown field"},
			check: func(t *testing.T, r Resolved) {
				if r.CPUBurst.Policy != CPUBurstAuto || r.CPUBurst.CPUBurstPercent != 300 {
					t.Errorf("cpu burst = %+v, want the last good auto/300", r.CPUBurst)
				}
				if r.Colocation.Enable {
					t.Error("colocation still enabled: the good section did not apply")
				}
			},
		},
		{
			name:        "typo at a first start means that section's defaults",
			change:      map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {"polcy": "none"}}`},
			wantRefused: []string{"cpu-burst-config: cpu-burst-config.clusterStrategy.polcy"},
			check: func(t *testing.T, r Resolved) {
				if r.CPUBurst != defaultCPUBurst() {
					t.Errorf("cpu burst = %+v, want defaults", r.CPUBurst)
				}
				if !r.ResourceThreshold.Enable || r.ResourceThreshold.CPUSuppressThresholdPercent != 60 {
					t.Errorf("threshold = %+v, want the good section applied", r.ResourceThreshold)
				}
			},
		},
		{
			name:        "missing comma is refused with its line and column, as Koordinator refuses it",
			change:      map[string]string{ResourceThresholdConfigKey: "{\n  \"clusterStrategy\": {\"enable\": false}\n  \"x\": 1\n}"},
			last:        last,
			wantRefused: []string{"resource-threshold-config: resource-threshold-config: line 3, column 3: invalid character"},
			check: func(t *testing.T, r Resolved) {
				if !r.ResourceThreshold.Enable {
					t.Error("suppression turned off by a section that did not parse")
				}
			},
		},
		{
			name:        "value out of range is refused like a syntax error",
			change:      map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"enable": false, "cpuSuppressThresholdPercent": 160}}`},
			last:        last,
			wantRefused: []string{"resource-threshold-config: resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent: 160 is not a percentage"},
			check: func(t *testing.T, r Resolved) {
				if !r.ResourceThreshold.Enable || r.ResourceThreshold.CPUSuppressThresholdPercent != 60 {
					t.Errorf("threshold = %+v, want the last good one", r.ResourceThreshold)
				}
			},
		},
		{
			name:        "unknown top-level key is reported and ignored",
			change:      map[string]string{"cpu-burst-confg": `{}`},
			last:        last,
			wantRefused: []string{"cpu-burst-confg: cpu-burst-confg: unknown section, ignored"},
			check: func(t *testing.T, r Resolved) {
				if r.CPUBurst.Policy != CPUBurstAuto {
					t.Errorf("cpu burst = %+v, want the good section", r.CPUBurst)
				}
			},
		},
		{
			name:   "a removed section means defaults, not its last value",
			change: map[string]string{ResourceThresholdConfigKey: ""},
			last:   last,
			check: func(t *testing.T, r Resolved) {
				if r.ResourceThreshold.Enable {
					t.Error("suppression still on after its section was removed")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := map[string]string{}
			for k, v := range good {
				data[k] = v
			}
			for k, v := range tt.change {
				if v == "" {
					delete(data, k)
				} else {
					data[k] = v
				}
			}
			cfg := Parse(data).KeepLastGood(tt.last)
			var got []string
			for _, r := range cfg.Refused() {
				got = append(got, r.Key+": "+r.Error())
			}
			if len(got) != len(tt.wantRefused) {
				t.Fatalf("refused %q, want %q", got, tt.wantRefused)
			}
			for i, want := range tt.wantRefused {
				if !strings.HasPrefix(got[i], want) {
					t.Errorf("refusal %q does not start with %q", got[i], want)
				}
			}
			r, err := cfg.ForNode(anolis)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
}
