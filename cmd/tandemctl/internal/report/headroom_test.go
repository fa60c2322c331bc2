package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/metrics/headroom"
)

func TestWriteHeadroom(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 13, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		s    headroom.Status
		want []string
	}{
		{
			name: "off on bare metal, before a sample",
			s:    headroom.Status{Why: "stealHeadroom: auto, and the node is not a virtual machine (no hypervisor flag)"},
			want: []string{"steal headroom  off (stealHeadroom: auto, and the node is not a virtual machine", "sample          none yet"},
		},
		{
			name: "holding BE on a VM",
			s: headroom.Status{Enabled: true, Why: "stealHeadroom: auto", Time: at, StealMilli: 200, PerCPUMilli: map[int]int64{1: 30, 0: 170},
				BaselineMilli: 5, BEUsedMilli: 1700, GuestMilli: 2000, CapacityMilli: 2000, Limited: true, CeilingMilli: 1075,
				KneeMilli: 2000, Holds: 1, LastHold: at, LastHoldReason: "steal 200m, 195m above its level without BE", Decision: "hold"},
			want: []string{"BE ceiling      1.07 CPUs of 2.00", "steal           0.20 CPUs (cpu0 17%, cpu1 3%); 0.01 without BE",
				"use             BE 1.70 CPUs, node 2.00 CPUs", "13:00:00: hold", "holds           1, the last at 13:00:00: steal 200m",
				"knee            the host took CPU back with the node at 2.00 CPUs"},
		},
		{
			name: "on, nothing held",
			s:    headroom.Status{Enabled: true, Why: "stealHeadroom: on", Time: at, CapacityMilli: 2000, Decision: "none"},
			want: []string{"BE ceiling      none: BE may use every CPU the node has"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			if err := WriteHeadroom(&b, &tt.s, Table); err != nil {
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
