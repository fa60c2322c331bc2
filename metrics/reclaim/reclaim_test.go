package reclaim

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/tandemkit/tandem/config/slo"
)

const gi = int64(1) << 30

// seed004 resolves an operator's slo-controller-config, as it runs under Koordinator, for a node
// without labels, so batch capacity is computed with the thresholds of a real cluster:
// cpuReclaimThresholdPercent 60, memoryReclaimThresholdPercent 65, memoryCalculatePolicy usage.
func seed004(t *testing.T) slo.ColocationSettings {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "slo", "testdata", "seed004.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := slo.ParseFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	r, err := cfg.ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.Colocation
}

func TestSeed004Settings(t *testing.T) {
	t.Parallel()
	s := SettingsFrom(seed004(t))
	want := Settings{
		CPUReclaimThresholdPercent: 60, MemoryReclaimThresholdPercent: 65,
		CPUCalculatePolicy: slo.CalculateByPodUsage, MemoryCalculatePolicy: slo.CalculateByPodUsage,
		BatchCPUThresholdPercent: 100, BatchMemoryThresholdPercent: 100,
	}
	if s != want {
		t.Fatalf("SettingsFrom(the operator's config) = %+v, want %+v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The node of every case: 32 cores and 128 GiB, 1 core and 4 GiB reserved, two service pods.
//
//	pod a: usage 4000m / 20Gi, request 8000m / 24Gi
//	pod b: usage 3000m / 10Gi, request 2000m /  8Gi
//
// With the operator's thresholds the node keeps 40% of CPU (12800m) and 35% of memory
// (48103633715 bytes) out of reach, and max(system, reserved) is 1500m and 4Gi.
func TestCompute(t *testing.T) {
	t.Parallel()
	seed := SettingsFrom(seed004(t))
	node := Input{
		Capacity:    Resources{CPUMilli: 32000, MemoryBytes: 128 * gi},
		SystemUsage: Resources{CPUMilli: 1500, MemoryBytes: 3 * gi},
		Reserved:    Resources{CPUMilli: 1000, MemoryBytes: 4 * gi},
		HP: []Pod{
			{UID: "a", Usage: Resources{CPUMilli: 4000, MemoryBytes: 20 * gi}, Request: Resources{CPUMilli: 8000, MemoryBytes: 24 * gi}},
			{UID: "b", Usage: Resources{CPUMilli: 3000, MemoryBytes: 10 * gi}, Request: Resources{CPUMilli: 2000, MemoryBytes: 8 * gi}},
		},
	}
	const (
		memSafety = 48103633715 // 128Gi × 35%, rounded down
		memBase   = 128*gi - memSafety - 4*gi
	)
	with := func(f func(*Settings)) Settings { s := seed; f(&s); return s }
	tests := []struct {
		name     string
		settings Settings
		input    Input
		want     Resources
		wantHP   Resources
	}{
		{
			name:     "operator's config: usage policy for both",
			settings: seed,
			input:    node,
			// cpu: 32000 − 12800 − 1500 − (4000+3000); memory: … − (20+10)Gi
			want:   Resources{CPUMilli: 10700, MemoryBytes: memBase - 30*gi},
			wantHP: Resources{CPUMilli: 7000, MemoryBytes: 30 * gi},
		},
		{
			name: "request policy",
			settings: with(func(s *Settings) {
				s.CPUCalculatePolicy, s.MemoryCalculatePolicy = slo.CalculateByPodRequest, slo.CalculateByPodRequest
			}),
			input:  node,
			want:   Resources{CPUMilli: 32000 - 12800 - 1500 - 10000, MemoryBytes: memBase - 32*gi},
			wantHP: Resources{CPUMilli: 10000, MemoryBytes: 32 * gi},
		},
		{
			name: "maxUsageRequest policy takes the larger term per pod",
			settings: with(func(s *Settings) {
				s.CPUCalculatePolicy, s.MemoryCalculatePolicy = slo.CalculateByPodMaxUsageRequest, slo.CalculateByPodMaxUsageRequest
			}),
			input: node,
			// cpu: max(4000, 8000) + max(3000, 2000); memory: max(20, 24) + max(10, 8) Gi
			want:   Resources{CPUMilli: 32000 - 12800 - 1500 - 11000, MemoryBytes: memBase - 34*gi},
			wantHP: Resources{CPUMilli: 11000, MemoryBytes: 34 * gi},
		},
		{
			name:     "memory by request, cpu by usage",
			settings: with(func(s *Settings) { s.MemoryCalculatePolicy = slo.CalculateByPodRequest }),
			input:    node,
			want:     Resources{CPUMilli: 10700, MemoryBytes: memBase - 32*gi},
			wantHP:   Resources{CPUMilli: 7000, MemoryBytes: 32 * gi},
		},
		{
			name:     "empty policy counts usage",
			settings: with(func(s *Settings) { s.CPUCalculatePolicy, s.MemoryCalculatePolicy = "", "" }),
			input:    node,
			want:     Resources{CPUMilli: 10700, MemoryBytes: memBase - 30*gi},
			wantHP:   Resources{CPUMilli: 7000, MemoryBytes: 30 * gi},
		},
		{
			name:     "batchCPUThresholdPercent caps cpu only",
			settings: with(func(s *Settings) { s.BatchCPUThresholdPercent = 20 }),
			input:    node,
			want:     Resources{CPUMilli: 6400, MemoryBytes: memBase - 30*gi},
			wantHP:   Resources{CPUMilli: 7000, MemoryBytes: 30 * gi},
		},
		{
			name:     "a cap above the result changes nothing",
			settings: with(func(s *Settings) { s.BatchCPUThresholdPercent, s.BatchMemoryThresholdPercent = 50, 50 }),
			input:    node,
			want:     Resources{CPUMilli: 10700, MemoryBytes: memBase - 30*gi},
			wantHP:   Resources{CPUMilli: 7000, MemoryBytes: 30 * gi},
		},
		{
			name:     "system usage above the reservation counts instead",
			settings: seed,
			input: func() Input {
				in := node
				in.SystemUsage = Resources{CPUMilli: 2500, MemoryBytes: 6 * gi}
				return in
			}(),
			want:   Resources{CPUMilli: 32000 - 12800 - 2500 - 7000, MemoryBytes: 128*gi - memSafety - 6*gi - 30*gi},
			wantHP: Resources{CPUMilli: 7000, MemoryBytes: 30 * gi},
		},
		{
			name:     "busy node floors at zero",
			settings: seed,
			input: Input{
				Capacity: node.Capacity, SystemUsage: node.SystemUsage, Reserved: node.Reserved,
				HP: []Pod{{UID: "big", Usage: Resources{CPUMilli: 30000, MemoryBytes: 100 * gi}}},
			},
			want:   Resources{},
			wantHP: Resources{CPUMilli: 30000, MemoryBytes: 100 * gi},
		},
		{
			name:     "the steal headroom's ceiling caps cpu below the formula",
			settings: seed,
			input:    func() Input { in := node; in.BECeilingMilli = 4000; return in }(),
			want:     Resources{CPUMilli: 4000, MemoryBytes: memBase - 30*gi},
			wantHP:   Resources{CPUMilli: 7000, MemoryBytes: 30 * gi},
		},
		{
			name:     "a ceiling above the formula changes nothing",
			settings: seed,
			input:    func() Input { in := node; in.BECeilingMilli = 20000; return in }(),
			want:     Resources{CPUMilli: 10700, MemoryBytes: memBase - 30*gi},
			wantHP:   Resources{CPUMilli: 7000, MemoryBytes: 30 * gi},
		},
		{
			name:     "idle node: threshold minus system",
			settings: seed,
			input:    Input{Capacity: node.Capacity, Reserved: node.Reserved},
			want:     Resources{CPUMilli: 32000 - 12800 - 1000, MemoryBytes: memBase},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Compute(tt.settings, tt.input)
			if got.Batch != tt.want {
				t.Errorf("Batch = %+v, want %+v", got.Batch, tt.want)
			}
			if got.HP != tt.wantHP {
				t.Errorf("HP = %+v, want %+v", got.HP, tt.wantHP)
			}
		})
	}
}

func TestComputeExactMemorySafety(t *testing.T) {
	t.Parallel()
	// 35% of 128Gi is 48103633715.2 bytes; the formula must not overflow or round up.
	got := Compute(SettingsFrom(seed004(t)), Input{Capacity: Resources{MemoryBytes: 128 * gi}})
	if got.Safety.MemoryBytes != 48103633715 || got.Batch.MemoryBytes != 128*gi-48103633715 {
		t.Fatalf("Safety = %d, Batch = %d", got.Safety.MemoryBytes, got.Batch.MemoryBytes)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    Settings
		ok   bool
	}{
		{name: "zero", ok: true},
		{name: "threshold above 100", s: Settings{CPUReclaimThresholdPercent: 101}},
		{name: "negative cap", s: Settings{BatchMemoryThresholdPercent: -1}},
		{name: "unknown policy", s: Settings{MemoryCalculatePolicy: "limit"}},
	}
	for _, tt := range tests {
		if err := tt.s.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestRequestFromLinux(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                         string
		shares, quota, period, limit int64
		want                         Resources
	}{
		{name: "2 cores, 4Gi", shares: 2048, quota: 400000, period: 100000, limit: 4 * gi, want: Resources{CPUMilli: 2000, MemoryBytes: 4 * gi}},
		{name: "250m as kubelet rounds it", shares: 256, want: Resources{CPUMilli: 250}},
		{name: "minimum shares with a quota: the quota", shares: 2, quota: 50000, period: 100000, want: Resources{CPUMilli: 500}},
		{name: "nothing requested", shares: 2},
		// Values no kubelet sends, but a CRI client may: they count as huge, never as negative (which
		// would hand the pod's share of the node to batch work).
		{name: "shares past int64 arithmetic", shares: 1 << 60, want: Resources{CPUMilli: 1 << 60 / 1024 * 1000}},
		{name: "the largest shares", shares: math.MaxInt64, want: Resources{CPUMilli: 9007199254740991999}},
		{name: "a quota past int64 arithmetic", shares: 2, quota: 1 << 62, period: 100000, want: Resources{CPUMilli: 46116860184273879}},
		{name: "the largest quota at the shortest period", shares: 2, quota: math.MaxInt64, period: 1, want: Resources{CPUMilli: math.MaxInt64}},
	}
	for _, tt := range tests {
		if got := RequestFromLinux(tt.shares, tt.quota, tt.period, tt.limit); got != tt.want {
			t.Errorf("%s: RequestFromLinux() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// FuzzRequestFromLinux: the estimate is never negative and never falls as shares, quota or the memory
// limit rise.
func FuzzRequestFromLinux(f *testing.F) {
	f.Add(int64(2048), int64(400000), int64(100000), 4*gi, int64(4096))
	f.Add(int64(1<<60), int64(1<<62), int64(100000), int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(int64(2), int64(math.MaxInt64), int64(1), int64(-1), int64(3))
	f.Fuzz(func(t *testing.T, shares, quota, period, limit, more int64) {
		lo := RequestFromLinux(shares, quota, period, limit)
		if lo.CPUMilli < 0 || lo.MemoryBytes < 0 {
			t.Fatalf("RequestFromLinux(%d, %d, %d, %d) = %+v: negative", shares, quota, period, limit, lo)
		}
		grow := func(v int64) int64 { return max(v, more) }
		checks := []struct {
			what string
			hi   Resources
		}{
			{"quota", RequestFromLinux(shares, grow(quota), period, limit)},
			{"memory limit", RequestFromLinux(shares, quota, period, grow(limit))},
		}
		if shares > 2 {
			checks = append(checks, struct {
				what string
				hi   Resources
			}{"shares", RequestFromLinux(grow(shares), quota, period, limit)})
		}
		for _, c := range checks {
			if c.hi.CPUMilli < lo.CPUMilli || c.hi.MemoryBytes < lo.MemoryBytes {
				t.Fatalf("RequestFromLinux(%d, %d, %d, %d) = %+v falls to %+v as the %s rises to %d", shares, quota, period, limit, lo, c.hi, c.what, more)
			}
		}
	})
}
