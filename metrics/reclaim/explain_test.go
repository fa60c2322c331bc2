package reclaim

import "testing"

func TestBound(t *testing.T) {
	t.Parallel()
	seed := SettingsFrom(seed004(t)) // keeps 40% of CPU and 35% of memory out of reach
	node := func(hpCPU, hpMemory int64) Input {
		return Input{
			Capacity:    Resources{CPUMilli: 32000, MemoryBytes: 128 * gi},
			SystemUsage: Resources{CPUMilli: 1500, MemoryBytes: 3 * gi},
			Reserved:    Resources{CPUMilli: 1000, MemoryBytes: 4 * gi},
			HP:          []Pod{{UID: "a", Usage: Resources{CPUMilli: hpCPU, MemoryBytes: hpMemory}}},
		}
	}
	with := func(f func(*Settings)) Settings { s := seed; f(&s); return s }
	tests := []struct {
		name          string
		settings      Settings
		input         Input
		cpu, memory   Bound
		cpuText       string
		batchCPUIsCap bool
	}{
		{
			name: "a quiet node: the safety margin is the largest term", settings: seed, input: node(7000, 30*gi),
			cpu: Bound{TermSafety, 12800}, memory: Bound{TermSafety, 48103633715},
			cpuText: "safety margin (100 − reclaimThresholdPercent) 12.80 cores",
		},
		{
			name: "busy services: their predicted peak", settings: seed, input: node(14000, 60*gi),
			cpu: Bound{TermHP, 14000}, memory: Bound{TermHP, 60 * gi},
			cpuText: "high-priority pods' predicted peak 14.00 cores",
		},
		{
			name: "services past capacity leave nothing; still their peak", settings: seed, input: node(40000, 30*gi),
			cpu: Bound{TermHP, 40000}, memory: Bound{TermSafety, 48103633715},
		},
		{
			name: "no safety margin, a busy system", settings: with(func(s *Settings) { s.CPUReclaimThresholdPercent = 100 }),
			input: func() Input { in := node(1000, 30*gi); in.SystemUsage.CPUMilli = 3000; return in }(),
			cpu:   Bound{TermSystem, 3000}, memory: Bound{TermSafety, 48103633715},
			cpuText: "system usage or reservation 3.00 cores",
		},
		{
			name: "a cap below the formula", settings: with(func(s *Settings) { s.BatchCPUThresholdPercent = 20 }), input: node(7000, 30*gi),
			cpu: Bound{TermCap, 6400}, memory: Bound{TermSafety, 48103633715}, batchCPUIsCap: true,
			cpuText: "batchThresholdPercent cap 6.40 cores",
		},
		{
			name: "a cap above the formula does not decide", settings: with(func(s *Settings) { s.BatchCPUThresholdPercent = 50 }), input: node(7000, 30*gi),
			cpu: Bound{TermSafety, 12800}, memory: Bound{TermSafety, 48103633715},
		},
		{
			name: "the steal headroom below the formula", settings: seed,
			input: func() Input { in := node(7000, 30*gi); in.BECeilingMilli = 3000; return in }(),
			cpu:   Bound{TermHeadroom, 3000}, memory: Bound{TermSafety, 48103633715},
			cpuText: "steal headroom ceiling 3.00 cores",
		},
		{
			name: "the steal headroom above the formula does not decide", settings: seed,
			input: func() Input { in := node(7000, 30*gi); in.BECeilingMilli = 20000; return in }(),
			cpu:   Bound{TermSafety, 12800}, memory: Bound{TermSafety, 48103633715},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := Compute(tt.settings, tt.input)
			if got := r.CPUBound(); got != tt.cpu {
				t.Errorf("CPUBound = %+v, want %+v (result %+v)", got, tt.cpu, r)
			}
			if got := r.MemoryBound(); got != tt.memory {
				t.Errorf("MemoryBound = %+v, want %+v", got, tt.memory)
			}
			if tt.cpuText != "" && r.CPUBound().CPUText() != tt.cpuText {
				t.Errorf("CPUText = %q, want %q", r.CPUBound().CPUText(), tt.cpuText)
			}
			if tt.batchCPUIsCap && r.Batch.CPUMilli != r.Cap.CPUMilli {
				t.Errorf("batch CPU %d is not the cap %d", r.Batch.CPUMilli, r.Cap.CPUMilli)
			}
		})
	}
}
