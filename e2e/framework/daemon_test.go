package framework

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/internal/polltest"
)

func TestDaemon(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		stop     bool
		wantExit string // in Exited's error once the daemon is gone
	}{
		{name: "exits by itself", args: []string{"-c", "echo last words; exit 3"}, wantExit: "last words"},
		{name: "stopped", args: []string{"-c", "exec sleep 60"}, stop: true, wantExit: "signal: terminated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := StartDaemon(tt.name, "/bin/sh", tt.args, nil, filepath.Join(t.TempDir(), "log"))
			if err != nil {
				t.Fatal(err)
			}
			if d.PID() <= 0 || d.Name() != tt.name {
				t.Errorf("PID() = %d, Name() = %q", d.PID(), d.Name())
			}
			if tt.stop {
				if err := d.Exited(); err != nil {
					t.Fatalf("Exited() of a running daemon = %v", err)
				}
				if err := d.Stop(context.Background(), 5*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			polltest.Within(t, 10*time.Second, "the daemon to exit", func() bool { return d.Exited() != nil })
			if err := d.Exited(); !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error()+d.LogTail(100), tt.wantExit) {
				t.Errorf("Exited() = %v, want the name and %q", err, tt.wantExit)
			}
		})
	}
}
