package extender

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr []string // field paths the error must name; none means valid
	}{
		{name: "defaults are valid", mutate: func(*Config) {}},
		{name: "Koordinator's defaults", mutate: func(c *Config) {
			if c.UsageThresholds != (ResourcePercents{CPU: 65, Memory: 95}) {
				t.Errorf("default thresholds = %+v, want cpu 65 memory 95", c.UsageThresholds)
			}
		}},
		{name: "threshold over 100", mutate: func(c *Config) { c.UsageThresholds.Memory = 101 }, wantErr: []string{"usageThresholds.memory"}},
		{name: "unknown policy", mutate: func(c *Config) { c.ExpiredMetricPolicy.BatchPods = "reject" }, wantErr: []string{"expiredMetricPolicy.batchPods"}},
		{name: "no weights", mutate: func(c *Config) { c.ResourceWeights = ResourceWeights{} }, wantErr: []string{"resourceWeights"}},
		{
			name: "every bad field is reported",
			mutate: func(c *Config) {
				c.NodeMetricExpirationSeconds = 0
				c.MaxRequestBodyBytes = -1
				c.MaxRequestsInflight = 0
				c.UsageThresholds.CPU = -1
			},
			wantErr: []string{"nodeMetricExpirationSeconds", "maxRequestBodyBytes", "maxRequestsInflight", "usageThresholds.cpu"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			for _, path := range tt.wantErr {
				if !strings.Contains(err.Error(), path) {
					t.Errorf("Validate() = %q, want it to name %s", err, path)
				}
			}
		})
	}
}
