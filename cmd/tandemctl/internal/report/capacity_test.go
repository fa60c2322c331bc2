package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/config/batchwindow"
	"github.com/tandemkit/tandem/metrics/reclaim"
	"github.com/tandemkit/tandem/metrics/reporter"
)

func TestWriteCapacity(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 11, 30, 0, 0, time.UTC)
	computed := reporter.CapacityStatus{
		Node: "node-a", Time: at, Enabled: true, Computed: true,
		CPU: &reporter.Terms{Capacity: 2000, Safety: 700, System: 300, HP: 100, HPUsage: 100, Batch: 900,
			Bound: reclaim.TermSafety, BoundText: "safety margin (100 − reclaimThresholdPercent) 0.70 cores"},
		Memory: &reporter.Terms{Capacity: 8 << 30, Safety: 4 << 30, System: 1 << 30, HP: 1 << 29, HPUsage: 1 << 29, Batch: 5 << 29,
			Bound: reclaim.TermSafety, BoundText: "safety margin (100 − reclaimThresholdPercent) 4.00 GiB"},
		Published: &reclaim.Resources{CPUMilli: 900, MemoryBytes: 5 << 29}, PublishedAt: at,
		Settings: reclaim.Settings{CPUReclaimThresholdPercent: 65, MemoryReclaimThresholdPercent: 50, CPUCalculatePolicy: "usage"},
	}
	tests := []struct {
		name string
		s    reporter.CapacityStatus
		want []string
	}{
		{
			name: "computed and published",
			s:    computed,
			want: []string{"node  ", "node-a", "colocation", "on",
				"capacity", "2.00 cores", "8.00 GiB",
				"− safety (reclaimThresholdPercent 65 / 50)", "0.70 cores",
				"− high-priority pods (usage / usage)", "cap (batchThresholdPercent)", "none",
				"= batch", "0.90 cores", "2.50 GiB",
				"decided by", "safety margin (100 − reclaimThresholdPercent) 0.70 cores",
				"on the Node", "batch-cpu 0.90, batch-memory 2.50 GiB, written 11:30:00"},
		},
		{
			name: "outside a batch window",
			s: func() reporter.CapacityStatus {
				s := computed
				s.Window = &batchwindow.State{Phase: batchwindow.PhaseEvicting, Window: "night", ClosedAt: at.Add(-time.Hour), Next: at.Add(10 * time.Hour),
					OutsidePercent: 0, Describe: "night 22:00-07:00 Mon,Tue (Asia/Shanghai)"}
				s.ComputedBatch, s.Batch = &reclaim.Resources{CPUMilli: 900, MemoryBytes: 5 << 29}, &reclaim.Resources{}
				s.Clock = "the node's clock is 2m0s behind the API server's"
				return s
			}(),
			want: []string{"× batch window (outsideCapacityPercent 0)", "0.00 cores", "batch windows", "night 22:00-07:00 Mon,Tue (Asia/Shanghai)",
				"window now", "evicting (night), closed at 2026-12-07T10:30:00Z, next change 2026-12-07T21:30:00Z", "clock", "2m0s behind"},
		},
		{
			name: "before the API server answered",
			s:    reporter.CapacityStatus{Node: "node-a", Why: "the node reporter has not started: the API server has not answered yet"},
			want: []string{"colocation", "off", "note", "has not started", "nothing written yet"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := WriteCapacity(&b, &tt.s, Table); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
		})
	}
	var b bytes.Buffer
	if err := WriteCapacity(&b, &computed, JSON); err != nil {
		t.Fatal(err)
	}
	var back reporter.CapacityStatus
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back.CPU == nil || back.CPU.Batch != 900 || back.CPU.Bound != reclaim.TermSafety {
		t.Errorf("-o json does not round-trip: %v, %+v\n%s", err, back, b.String())
	}
}
