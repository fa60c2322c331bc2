package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/metrics/interference"
)

func TestWriteInterference(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		s    interference.Status
		want []string
	}{
		{
			name: "off",
			s:    interference.Status{ThresholdMicros: 4096},
			want: []string{"LS wait guard  off (resource-threshold-config lsWaitGuard: false)", "sample         none yet"},
		},
		{
			name: "on without the run-queue collector",
			s:    interference.Status{Enabled: true, ThresholdMicros: 4096, Why: "no run-queue samples: start with --run-queue-latency"},
			want: []string{"on: BE held back while more than 1% of LS waits for a CPU last 4.096ms or longer", "not running    no run-queue samples"},
		},
		{
			name: "holding BE, then judged not BE's doing",
			s: interference.Status{Enabled: true, ThresholdMicros: 1024, Time: at, Interval: 2 * time.Second, Waits: 800, SlowWaits: 200, Waited: 1234 * time.Millisecond,
				Worst: "e2e/web/app", BEUsedMilli: 1500, CapacityMilli: 2000, Holds: 1, Releases: 1, LastHold: at.Add(-4 * time.Second),
				LastHoldReason: "200 of 800 LS waits", LastVerdict: "not BE's doing: LS waited 600 ms per second at the hold, 610 ms",
				IgnoreUntil: at.Add(5 * time.Minute), Decision: interference.DecisionRelease},
			want: []string{"BE ceiling     none: BE may use every CPU", "LS waits       800 in 2s, 1.234s waited in all, 200 (25.0%) slow, most in e2e/web/app",
				"BE use         1.50 CPUs", "20:00:00: release", "holds          1, the last at 19:59:56: 200 of 800 LS waits",
				"last verdict   not BE's doing", "ignoring       LS waits hold BE no more until 20:05:00"},
		},
		{
			name: "held",
			s: interference.Status{Enabled: true, ThresholdMicros: 4096, Time: at, Interval: 10 * time.Second, Limited: true, CeilingMilli: 750,
				CapacityMilli: 2000, Decision: interference.DecisionHold},
			want: []string{"BE ceiling     0.75 CPUs of 2.00"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := WriteInterference(&b, &tt.s, Table); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
}
