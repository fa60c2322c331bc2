package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/bench/internal/exepages"
)

func TestExecutableLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    idleCost
		want string
	}{
		{
			name: "large modules by name, small ones summed",
			c: idleCost{Executable: &exepages.Report{ResidentBytes: 3 << 20, ByModule: map[string]int64{
				exepages.Std: 2 << 20, "k8s.io/api": 900 << 10, exepages.Unattributed: 100 << 10, "a": 12 << 10, "b": 12 << 10,
			}}},
			want: "3.00 MiB: std 2.00, k8s.io/api 0.88, (unattributed) 0.10, 2 others 0.02",
		},
		{
			name: "nothing small",
			c:    idleCost{Executable: &exepages.Report{ResidentBytes: 1 << 20, ByModule: map[string]int64{exepages.Std: 1 << 20}}},
			want: "1.00 MiB: std 1.00",
		},
		{
			name: "not measured",
			c:    idleCost{ExecutableErr: "open the page map of pid 7: permission denied"},
			want: "not measured: open the page map of pid 7: permission denied",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := executableLine(tc.c); got != tc.want {
				t.Errorf("executableLine = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestVerdict: a figure over its limit fails the run only when the run has shown the miss, and the
// verdict always says how many figures were within the limits on their own.
func TestVerdict(t *testing.T) {
	t.Parallel()
	ok := &comparison{Meets: true}
	// Both over the limit; only the second interval lies wholly above zero.
	over := ptr(comparison{}.withExcess(interval{Low: -5 * time.Microsecond, High: 40 * time.Microsecond}))
	shown := ptr(comparison{}.withExcess(interval{Low: 5 * time.Microsecond, High: 40 * time.Microsecond}))
	run := func(p50, p99 *comparison) latencyRun {
		return latencyRun{rows: []row{
			{rpc: "Version", mode: "sequential", p50: ok, p99: ok},
			{rpc: "ListContainers", mode: "parallel-8", p50: p50, p99: p99},
		}}
	}
	tests := []struct {
		name      string
		runs      []latencyRun
		wantLines []string
	}{
		{
			name:      "every figure within its limit",
			runs:      []latencyRun{run(ok, ok), run(ok, ok)},
			wantLines: []string{"met in all 2 consecutive runs", "figures within the limits on their own: 8 of 8"},
		},
		{
			name: "over by less than the run resolves",
			runs: []latencyRun{run(ok, over), run(ok, ok)},
			wantLines: []string{"met in all 2 consecutive runs",
				"run 1 over the limit by less than it can resolve [e]: ListContainers parallel-8 p99",
				"figures within the limits on their own: 7 of 8"},
		},
		{
			name:      "a miss the run has shown",
			runs:      []latencyRun{run(ok, ok), run(shown, ok)},
			wantLines: []string{"MISSED in run 2 (met in 1 of 2)", "figures within the limits on their own: 7 of 8"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b strings.Builder
			(&report{runs: tt.runs}).printVerdict(&b)
			for _, want := range tt.wantLines {
				if !strings.Contains(b.String(), want) {
					t.Errorf("verdict lacks %q:\n%s", want, b.String())
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
