package nri

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{name: "defaults", mod: func(*Config) {}},
		{name: "no socket", mod: func(c *Config) { c.Socket = "" }, wantErr: "nri-socket"},
		{name: "index of one digit", mod: func(c *Config) { c.Index = "4" }, wantErr: "nri-plugin-index"},
		{name: "index not digits", mod: func(c *Config) { c.Index = "ab" }, wantErr: "nri-plugin-index"},
		// Shorter than the answer's margin: every event would be late.
		{name: "timeout too short", mod: func(c *Config) { c.RequestTimeout = 100 * time.Millisecond }, wantErr: "nri-request-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}
