package headroom

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/qos"
)

// sample is one second of a 2-CPU node: what LS and BE used and what the host took back.
type sample struct{ ls, be, steal int64 }

var t0 = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)

func snapshot(i int, s sample) *collector.Snapshot {
	return &collector.Snapshot{
		Time:     t0.Add(time.Duration(i) * time.Second),
		Capacity: collector.Usage{CPUMilli: 2000},
		Node:     collector.Usage{CPUMilli: s.ls + s.be},
		Steal:    collector.Steal{CPUMilli: s.steal},
		Containers: []collector.ContainerUsage{
			{Target: collector.Target{Pod: "ls", QoS: qos.LS}, Usage: collector.Usage{CPUMilli: s.ls}},
			{Target: collector.Target{Pod: "be", QoS: qos.BE}, Usage: collector.Usage{CPUMilli: s.be}},
		},
	}
}

func repeat(n int, s sample) []sample {
	out := make([]sample, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func seq(parts ...[]sample) []sample {
	var out []sample
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// held is five quiet samples, then one in which steal rises by 200m while BE runs at 1700m: a hold.
var held = seq(repeat(5, sample{ls: 300}), repeat(1, sample{ls: 300, be: 1700, steal: 200}))

func on() Config {
	c := DefaultConfig()
	c.Enable = true
	return c
}

func TestController(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		samples []sample
		// want is the ceiling after the last sample (0: none); holds how many holds there were.
		want      int64
		wantHolds int64
		decision  string
	}{
		{
			name:     "no steal: no ceiling",
			cfg:      on(),
			samples:  repeat(30, sample{ls: 300, be: 1700}),
			decision: "none",
		},
		{
			name:      "steal while BE runs holds BE to 3/4 of what it ran",
			cfg:       on(),
			samples:   seq(repeat(5, sample{ls: 300}), repeat(1, sample{ls: 300, be: 1700, steal: 200})),
			want:      1700 * 3 / 4,
			wantHolds: 1,
			decision:  "hold",
		},
		{
			name:    "steal below the threshold is noise",
			cfg:     on(),
			samples: seq(repeat(5, sample{ls: 300}), repeat(20, sample{ls: 300, be: 1700, steal: 40})),
		},
		{
			name:     "steal the host takes without BE is not BE's fault",
			cfg:      on(),
			samples:  seq(repeat(60, sample{ls: 300, steal: 150}), repeat(5, sample{ls: 300, be: 1700, steal: 170})),
			decision: "none",
		},
		{
			name:    "switched off: the same steal holds nothing",
			cfg:     DefaultConfig(),
			samples: seq(repeat(5, sample{ls: 300}), repeat(3, sample{ls: 300, be: 1700, steal: 300})),
		},
		{
			name:      "a second hold cuts from the ceiling, not from use, and never below the floor",
			cfg:       on(),
			samples:   seq(held, repeat(8, sample{ls: 300, be: 250, steal: 600})),
			want:      200, // 10% of 2000
			wantHolds: 2,   // 1275, then 250*3/4 < floor: 200; held at the floor after that
		},
		{
			name:    "calm raises the ceiling a step every ten samples",
			cfg:     on(),
			samples: seq(held, repeat(20, sample{ls: 300, be: 1000})),
			// 1275, then +100 twice; the knee (2000) is not near yet: 300 + 1375 + 100 < 2000.
			want:      1475,
			wantHolds: 1,
			decision:  "raise",
		},
		{
			name:    "near the knee the ceiling creeps",
			cfg:     on(),
			samples: seq(held, repeat(70, sample{ls: 300, be: 1000})),
			// The knee is 2000m (LS 300m + BE 1700m). 1275m rises by 100m four times to 1675m (LS 300m +
			// 1675m + 100m would pass 2000m), then by 25m three times.
			want:      1750,
			wantHolds: 1,
		},
		{
			name:      "the ceiling goes once it reaches the node",
			cfg:       on(),
			samples:   seq(held, repeat(300, sample{ls: 300, be: 300})),
			wantHolds: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			c, err := New(tt.cfg, "test", reg)
			if err != nil {
				t.Fatal(err)
			}
			var st Status
			for i, s := range tt.samples {
				st = c.Observe(snapshot(i, s))
			}
			got, limited := c.Ceiling()
			if got != tt.want || limited != (tt.want > 0) {
				t.Errorf("ceiling = %dm (limited %v), want %dm; last status %+v", got, limited, tt.want, st)
			}
			if st.Holds != tt.wantHolds {
				t.Errorf("holds = %d, want %d", st.Holds, tt.wantHolds)
			}
			if tt.decision != "" && st.Decision != tt.decision {
				t.Errorf("last decision = %q, want %q", st.Decision, tt.decision)
			}
			if h := testutil.ToFloat64(c.holds); int64(h) != tt.wantHolds {
				t.Errorf("tandem_headroom_holds_total = %v, want %d", h, tt.wantHolds)
			}
			wantGauge := float64(tt.want) / 1000
			if tt.want == 0 {
				wantGauge = 2
			}
			if g := testutil.ToFloat64(c.ceilingGauge); g != wantGauge {
				t.Errorf("tandem_headroom_be_ceiling_cores = %v, want %v", g, wantGauge)
			}
		})
	}
}

func TestHoldReasonNamesTheFigures(t *testing.T) {
	t.Parallel()
	c, err := New(on(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seq(repeat(3, sample{ls: 300}), repeat(1, sample{ls: 300, be: 1700, steal: 200})) {
		c.Observe(snapshot(i, s))
	}
	got := c.Status().LastHoldReason
	for _, want := range []string{"steal 200m", "200m above its level without BE", "BE used 1700m", "BE held to 1275m"} {
		if !strings.Contains(got, want) {
			t.Errorf("hold reason %q lacks %q", got, want)
		}
	}
}

func TestKneeIsForgotten(t *testing.T) {
	t.Parallel()
	cfg := on()
	cfg.KneeMemory = 30 * time.Second
	c, err := New(cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seq(repeat(3, sample{ls: 300}), repeat(1, sample{ls: 300, be: 1700, steal: 200}), repeat(40, sample{ls: 300, be: 1000})) {
		c.Observe(snapshot(i, s))
	}
	if k := c.Status().KneeMilli; k != 0 {
		t.Errorf("knee = %dm 40 s after the hold, want forgotten after 30 s", k)
	}
}

func TestReconfigureOffDropsTheCeiling(t *testing.T) {
	t.Parallel()
	c, err := New(on(), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seq(repeat(3, sample{ls: 300}), repeat(1, sample{ls: 300, be: 1700, steal: 200})) {
		c.Observe(snapshot(i, s))
	}
	if _, limited := c.Ceiling(); !limited {
		t.Fatal("no ceiling after a hold")
	}
	bad := on()
	bad.BackoffPercent = 0
	if err := c.Reconfigure(bad, "bad"); err == nil || !strings.Contains(err.Error(), "backoffPercent") {
		t.Fatalf("Reconfigure(backoffPercent 0) = %v, want an error naming backoffPercent", err)
	}
	if _, limited := c.Ceiling(); !limited {
		t.Fatal("a refused configuration dropped the ceiling")
	}
	if err := c.Reconfigure(DefaultConfig(), "stealHeadroom: off"); err != nil {
		t.Fatal(err)
	}
	if m, limited := c.Ceiling(); limited {
		t.Errorf("ceiling %dm after switching off", m)
	}
	if s := c.Status(); s.Enabled || s.Why != "stealHeadroom: off" {
		t.Errorf("status after switching off = %+v", s)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"defaults", func(*Config) {}, ""},
		{"negative threshold", func(c *Config) { c.StealThresholdMilli = -1 }, "stealThresholdMilli"},
		{"backoff 100 never holds", func(c *Config) { c.BackoffPercent = 100 }, "backoffPercent"},
		{"raise after 0", func(c *Config) { c.RaiseAfterSamples = 0 }, "raiseAfterSamples"},
		{"step 0", func(c *Config) { c.RaiseStepPercent = 0 }, "raiseStepPercent"},
		{"floor above the node", func(c *Config) { c.MinPercent = 101 }, "minPercent"},
		{"no baseline window", func(c *Config) { c.BaselineSamples = 0 }, "baselineSamples"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

func TestDetectVM(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		files map[string]string
		vm    bool
		why   string
	}{
		{"x86 guest", map[string]string{"proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n", "proc/stat": "cpu 1 2 3 4 5 6 7 0\n"}, true, "hypervisor flag"},
		{"bare metal", map[string]string{"proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu vme lahf_lm\n", "proc/stat": "cpu 1 2 3 4 5 6 7 0 0 0\n"}, false, "no hypervisor flag"},
		{"Xen", map[string]string{"proc/cpuinfo": "flags : fpu\n", "sys/hypervisor/type": "xen\n"}, true, `"xen"`},
		{"arm64 cloud instance", map[string]string{"proc/cpuinfo": "Features\t: fp asimd\n", "sys/class/dmi/id/sys_vendor": "Amazon EC2\n"}, true, "Amazon EC2"},
		{"steal counted", map[string]string{"proc/cpuinfo": "flags : fpu\n", "proc/stat": "cpu  10 0 10 80 0 0 0 4 0 0\ncpu0 10 0 10 80 0 0 0 4 0 0\n"}, true, "steal"},
		{"nothing readable", map[string]string{}, false, "no hypervisor flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for p, v := range tt.files {
				p = filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			vm, why := DetectVM(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
			if vm != tt.vm || !strings.Contains(why, tt.why) {
				t.Errorf("DetectVM = %v, %q; want %v and a reason naming %q", vm, why, tt.vm, tt.why)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode   slo.StealHeadroomMode
		vm     bool
		enable bool
		why    string
	}{
		{slo.StealHeadroomAuto, true, true, "auto, and the node is a virtual machine (flag)"},
		{slo.StealHeadroomAuto, false, false, "is not a virtual machine"},
		{slo.StealHeadroomOn, false, true, "stealHeadroom: on"},
		{slo.StealHeadroomOff, true, false, "stealHeadroom: off"},
	}
	for _, tt := range tests {
		r := slo.ResourceThresholdSettings{StealHeadroom: tt.mode, StealThresholdPercent: 7}
		cfg, why := Resolve(DefaultConfig(), r, tt.vm, "flag")
		if cfg.Enable != tt.enable || !strings.Contains(why, tt.why) || cfg.StealThresholdMilli != 70 {
			t.Errorf("Resolve(%s, vm %v) = enable %v threshold %dm %q; want enable %v, 70m, %q", tt.mode, tt.vm, cfg.Enable, cfg.StealThresholdMilli, why, tt.enable, tt.why)
		}
	}
}
