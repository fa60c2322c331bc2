package slo

import (
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// seed004 returns the data of the operator's slo-controller-config, read the way the API server would hand
// it to a client: as a core/v1 ConfigMap.
func seed004(t testing.TB) (raw []byte, data map[string]string) {
	t.Helper()
	raw, err := os.ReadFile("testdata/seed004.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
		t.Fatalf("testdata/seed004.yaml is not a ConfigMap: %v", err)
	}
	return raw, cm.Data
}

func TestParseSeed004(t *testing.T) {
	raw, data := seed004(t)
	if got, want := len(data), 6; got != want {
		t.Fatalf("the operator's ConfigMap has %d data keys, want %d", got, want)
	}

	cfg := Parse(data)
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the sections Parse kept do not validate: %v", err)
	}
	// An operator's ConfigMap from a Koordinator cluster works unchanged: Tandem reads every key of it
	// (host-application-config included), so there is nothing to warn about.
	var wantWarnings []string
	if got := cfg.Warnings(); !slices.Equal(got, wantWarnings) {
		t.Errorf("warnings:\n got %q\nwant %q", got, wantWarnings)
	}
	// The operator's system-config lacks the comma after clusterStrategy (copied from Koordinator's own docs).
	// Koordinator's slo-controller cannot decode it and neither does Tandem: that section is refused,
	// located, and every other section applies.
	refused := cfg.Refused()
	wantRefusal := `system-config: line 7, column 3: invalid character '"' after object key:value pair; fix the JSON`
	if len(refused) != 1 || refused[0].Key != SystemConfigKey || refused[0].Error() != wantRefusal {
		t.Fatalf("refused = %q, want only %q", refused, wantRefusal)
	}
	for _, key := range SectionKeys() {
		// Seed 004 is a Koordinator ConfigMap: it has none of Tandem's own sections.
		want := key != SystemConfigKey && key != BatchWindowConfigKey && key != DryRunConfigKey
		if got := sectionPresent(cfg, key); got != want {
			t.Errorf("section %s read: %v, want %v", key, got, want)
		}
	}

	fromFile, err := ParseFile(raw)
	if err != nil {
		t.Fatalf("ParseFile(the operator's manifest) = %v", err)
	}
	if !reflect.DeepEqual(fromFile, cfg) {
		t.Errorf("ParseFile(manifest) and Parse(data) differ:\n%+v\n%+v", fromFile, cfg)
	}
}

// parseStrict is Parse for tests that look at one refusal: the refusals joined, and no config with them.
func parseStrict(data map[string]string) (*Config, error) {
	cfg := Parse(data)
	if err := refusals(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func refusals(cfg *Config) error {
	var errs []error
	for _, r := range cfg.Refused() {
		errs = append(errs, r)
	}
	return errors.Join(errs...)
}

func sectionPresent(c *Config, key string) bool { return c.sections[key] != nil }

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name string
		data map[string]string
		// want are substrings that must all appear in the error.
		want []string
	}{
		{
			name: "typo in a cluster strategy key",
			data: map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"enable": true, "cpuSupressThresholdPercent": 65}}`},
			want: []string{"resource-threshold-config.clusterStrategy.cpuSupressThresholdPercent: unknown field"},
		},
		{
			name: "typo deep inside a node strategy",
			data: map[string]string{ResourceQOSConfigKey: `{"nodeStrategies": [{"name": "a", "nodeSelector": {"matchLabels": {"k": "v"}},
				"beClass": {"memoryQOS": {"wmarkRatoi": 90}}}]}`},
			want: []string{"resource-qos-config.nodeStrategies[0].beClass.memoryQOS.wmarkRatoi: unknown field"},
		},
		{
			name: "typo in a node selector",
			data: map[string]string{CPUBurstConfigKey: `{"nodeStrategies": [{"name": "a", "nodeSelector": {"matchLabel": {"k": "v"}}}]}`},
			want: []string{"cpu-burst-config.nodeStrategies[0].nodeSelector.matchLabel: unknown field"},
		},
		{
			name: "typo in colocation nodeConfigs",
			data: map[string]string{ColocationConfigKey: `{"enable": true, "nodeConfigs": [{"name": "a", "updateTimeThresholdSecond": 1}]}`},
			want: []string{"colocation-config.nodeConfigs[0].updateTimeThresholdSecond: unknown field"},
		},
		{
			name: "every typo is reported, not just the first",
			data: map[string]string{
				CPUBurstConfigKey: `{"clusterStrategy": {"polcy": "auto", "cpuBurstPrecent": 100}}`,
				SystemConfigKey:   `{"clusterStrategy": {"minFreeKbytesFactr": 100}}`,
			},
			want: []string{
				"cpu-burst-config.clusterStrategy.cpuBurstPrecent: unknown field",
				"cpu-burst-config.clusterStrategy.polcy: unknown field",
				"system-config.clusterStrategy.minFreeKbytesFactr: unknown field",
			},
		},
		{
			name: "number written as a string",
			data: map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"cpuSuppressThresholdPercent": "65"}}`},
			want: []string{`resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent: want an integer, got "65"`},
		},
		{
			name: "fraction where an integer is required",
			data: map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {"cfsQuotaBurstPercent": 300.5}}`},
			want: []string{"cpu-burst-config.clusterStrategy.cfsQuotaBurstPercent: want an integer that fits int64, got 300.5"},
		},
		{
			name: "bool written as a string",
			data: map[string]string{ColocationConfigKey: `{"enable": "false"}`},
			want: []string{`colocation-config.enable: want true or false, got "false"`},
		},
		{
			name: "bad duration",
			data: map[string]string{ColocationConfigKey: `{"metricAggregatePolicy": {"durations": ["5m", "10 minutes"]}}`},
			want: []string{"colocation-config.metricAggregatePolicy.durations[1]: time: "},
		},
		{
			name: "bad quantity",
			data: map[string]string{SystemConfigKey: `{"clusterStrategy": {"totalNetworkBandwidth": "lots"}}`},
			want: []string{"system-config.clusterStrategy.totalNetworkBandwidth: quantities must match"},
		},
		{
			name: "key written twice",
			data: map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {"policy": "auto", "cpuBurstPercent": 200, "policy": "none"}}`},
			want: []string{"cpu-burst-config.clusterStrategy.policy: written twice in one object; keep one"},
		},
		{
			name: "type error located inside a node strategy's list",
			data: map[string]string{ColocationConfigKey: `{"nodeConfigs": [{"name": "a", "nodeSelector": {"matchLabels": {"k": "v"}},
				"metricAggregatePolicy": {"durations": ["5m", 3]}}]}`},
			want: []string{"colocation-config.nodeConfigs[0].metricAggregatePolicy.durations[1]: want a string, got 3"},
		},
		{
			name: "misspelt section name",
			data: map[string]string{"resource-qos-confg": `{}`},
			want: []string{"resource-qos-confg: unknown section, ignored; spell it as one of colocation-config, resource-threshold-config"},
		},
		{
			name: "syntax error other than a missing comma, located",
			data: map[string]string{CPUBurstConfigKey: "{\n  \"clusterStrategy\": {\n    \"policy\" \"auto\"\n  }\n}"},
			want: []string{"cpu-burst-config: line 3, column 14: invalid character '\"' after object key"},
		},
		{
			name: "missing comma on the same line is not guessed at",
			data: map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {"policy": "auto" "cpuBurstPercent": 100}}`},
			want: []string{"cpu-burst-config: line 1, column 39: invalid character '\"' after object key:value pair"},
		},
		{
			name: "truncated JSON",
			data: map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {"policy": "auto"`},
			want: []string{"cpu-burst-config: the JSON ends early"},
		},
		{
			name: "text after the JSON value",
			data: map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {}} {}`},
			want: []string{"cpu-burst-config: unexpected text after the JSON value"},
		},
		{
			name: "section is not an object",
			data: map[string]string{CPUBurstConfigKey: `[1, 2]`},
			want: []string{"cpu-burst-config: want a mapping, got a list"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseStrict(tt.data)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", cfg)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\ndoes not contain %q", err, want)
				}
			}
		})
	}
}

func TestParseTolerates(t *testing.T) {
	anolis := map[string]string{"kubernetes.io/kernel": "anolis"}
	tests := []struct {
		name         string
		data         map[string]string
		wantWarnings []string
		check        func(t *testing.T, r Resolved)
	}{
		{
			// Koordinator's own docs spell this key with capitals; encoding/json matches it, so must Tandem.
			name: "key in another case",
			data: map[string]string{ResourceThresholdConfigKey: `{"clusterStrategy": {"CPUEvictTimeWindowSeconds": 60}}`},
			wantWarnings: []string{`resource-threshold-config.clusterStrategy.CPUEvictTimeWindowSeconds: matched "cpuEvictTimeWindowSeconds" ` +
				`case-insensitively; spell it "cpuEvictTimeWindowSeconds"`},
			check: func(t *testing.T, r Resolved) {
				if got := r.ResourceThreshold.CPUEvictTimeWindowSeconds; got != 60 {
					t.Errorf("cpuEvictTimeWindowSeconds = %d, want 60", got)
				}
			},
		},
		{
			name:         "empty section means defaults",
			data:         map[string]string{CPUBurstConfigKey: "  \n"},
			wantWarnings: []string{"cpu-burst-config: empty; using Koordinator's defaults"},
			check: func(t *testing.T, r Resolved) {
				if r.CPUBurst != defaultCPUBurst() {
					t.Errorf("cpu burst = %+v, want defaults", r.CPUBurst)
				}
			},
		},
		{
			name: "Koordinator keys Tandem does not read",
			data: map[string]string{"cpu-normalization-config": `{"enable": false}`, "resource-amplification-config": "not even JSON"},
			wantWarnings: []string{
				"cpu-normalization-config: a Koordinator key Tandem does not read; ignored",
				"resource-amplification-config: a Koordinator key Tandem does not read; ignored",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseStrict(tt.data)
			if err != nil {
				t.Fatalf("Parse refused %v", err)
			}
			if got := cfg.Warnings(); !slices.Equal(got, tt.wantWarnings) {
				t.Errorf("warnings:\n got %q\nwant %q", got, tt.wantWarnings)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate = %v", err)
			}
			r, err := cfg.ForNode(anolis)
			if err != nil {
				t.Fatalf("ForNode = %v", err)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	anolis := map[string]string{"kubernetes.io/kernel": "anolis"}
	tests := []struct {
		name    string
		file    string
		wantErr string
		check   func(t *testing.T, r Resolved)
	}{
		{
			name: "YAML with nested objects",
			file: `
resource-qos-config:
  clusterStrategy:
    lsClass:
      memoryQOS: {enable: true, minLimitPercent: 50, lowLimitPercent: 80, throttlingPercent: 90}
  nodeStrategies:
  - name: anolis
    nodeSelector:
      matchExpressions:
      - {key: kubernetes.io/kernel, operator: In, values: [anolis, alinux]}
    lsClass:
      memoryQOS: {throttlingPercent: 70}
cpu-burst-config:
  clusterStrategy: {policy: cpuBurstOnly, cpuBurstPercent: 500}
`,
			check: func(t *testing.T, r Resolved) {
				m := r.ResourceQOS.LS.MemoryQOS
				if !m.Enable || m.MinLimitPercent != 50 || m.LowLimitPercent != 80 || m.ThrottlingPercent != 70 {
					t.Errorf("ls memoryQOS = %+v, want enable, min 50, low 80 from the cluster and throttling 70 from the node", m)
				}
				if r.CPUBurst.Policy != CPUBurstOnly || r.CPUBurst.CPUBurstPercent != 500 || r.CPUBurst.CFSQuotaBurstPercent != 300 {
					t.Errorf("cpu burst = %+v, want cpuBurstOnly, 500, default 300", r.CPUBurst)
				}
			},
		},
		{
			name: "JSON with nested objects",
			file: `{"resource-threshold-config": {"clusterStrategy": {"enable": true, "memoryEvictThresholdPercent": 80}}}`,
			check: func(t *testing.T, r Resolved) {
				th := r.ResourceThreshold
				if !th.Enable || th.MemoryEvictThresholdPercent != 80 || th.MemoryEvictLowerPercent != 78 {
					t.Errorf("threshold = %+v, want enabled, evict at 80, stop at 78", th)
				}
			},
		},
		{
			name: "sections as JSON strings, as in a ConfigMap",
			file: "system-config: |\n  {\"clusterStrategy\": {\"watermarkScaleFactor\": 200}}\n",
			check: func(t *testing.T, r Resolved) {
				if p := r.System.WatermarkScaleFactor; p == nil || *p != 200 {
					t.Errorf("watermarkScaleFactor = %v, want 200", p)
				}
			},
		},
		{
			name:    "typo inside a nested object",
			file:    "cpu-burst-config:\n  clusterStrategy:\n    sharePoolThreshold: 50\n",
			wantErr: "cpu-burst-config.clusterStrategy.sharePoolThreshold: unknown field",
		},
		{
			name:    "section of the wrong shape",
			file:    "cpu-burst-config: 42\n",
			wantErr: "cpu-burst-config: want the section as a JSON string or a mapping, got 42",
		},
		{
			name:    "duplicate key in YAML",
			file:    "cpu-burst-config:\n  clusterStrategy: {policy: auto}\ncpu-burst-config:\n  clusterStrategy: {policy: none}\n",
			wantErr: "read slo config:",
		},
		{
			name:    "not a mapping",
			file:    "- cpu-burst-config\n",
			wantErr: "read slo config: the document must be a mapping of section names",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseFile([]byte(tt.file))
			if err == nil {
				err = refusals(cfg)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseFile error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseFile = %v", err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate = %v", err)
			}
			r, err := cfg.ForNode(anolis)
			if err != nil {
				t.Fatalf("ForNode = %v", err)
			}
			tt.check(t, r)
		})
	}
}

func TestParseErrorsAreFieldErrors(t *testing.T) {
	_, err := parseStrict(map[string]string{CPUBurstConfigKey: `{"clusterStrategy": {"polcy": "auto"}}`})
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a *FieldError", err)
	}
	if want := "cpu-burst-config.clusterStrategy.polcy"; fe.Path != want {
		t.Errorf("path = %q, want %q", fe.Path, want)
	}
}
