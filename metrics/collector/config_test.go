package collector

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring naming the field; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"interval too short", func(c *Config) { c.Usage.Interval = time.Millisecond }, "usage.interval"},
		{"disabled source may have any interval", func(c *Config) { c.CPI = Source{} }, ""},
		{"run queue without tracefs", func(c *Config) { c.RunQueue.Enabled = true; c.TracefsRoot = "" }, "tracefsRoot"},
		{"run queue off by default needs no tracefs", func(c *Config) { c.TracefsRoot = "" }, ""},
		{"all errors reported", func(c *Config) { c.RunQueue.Enabled = true; c.PSI.Interval = 0; c.RunQueue.Interval = 0 }, "runQueue.interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}
