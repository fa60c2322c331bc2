package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/memoryqos"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// memoryQOSConfig enables memory QoS for lsClass with every key an operator's slo-controller-config
// writes, Anolis' included.
const memoryQOSConfig = `{"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": true, "minLimitPercent": 100,
  "throttlingPercent": 80, "wmarkRatio": 95, "wmarkScalePermill": 20, "wmarkMinAdj": -25, "priorityEnable": 1,
  "priority": 12, "oomKillGroup": 1}}}}`

// anolisFiles are the memory files beyond min/low/high, which this host's kernel lacks.
var anolisFiles = []string{"memory.wmark_ratio", "memory.wmark_scale_factor", "memory.wmark_min_adj", "memory.priority",
	"memory.use_priority_oom", "memory.oom.group"}

// fakeCgroups builds a cgroup v1 hierarchy offering files in its memory controller, for the kernels this
// host is not (Anolis OS); TestMemoryQoSReportThisHost uses the real one.
func fakeCgroups(t *testing.T, files ...string) cgroup.Prober {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"cpu", "memory"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(root, "memory", f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// newMemoryQoSConsumers returns consumers running base, and a context whose log is kept with a function
// returning it.
func newMemoryQoSConsumers(t *testing.T, base policy.Config) (*consumers, context.Context, func() string) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	var col atomic.Pointer[slo.Resolved]
	r := resolve(t, nil)
	col.Store(&r)
	return &consumers{base: base, colocation: &col, resolved: r}, klog.NewContext(t.Context(), logger),
		func() string { return logger.GetSink().(ktesting.Underlier).GetBuffer().String() }
}

func byKey(list []knob.Status) map[string]knob.Status {
	out := map[string]knob.Status{}
	for _, s := range list {
		out[s.Key] = s
	}
	return out
}

// TestMemoryQoSReport: the report follows the configuration in force and the kernel; a kernel lacking
// the files gets one log line naming them, not one per configuration handed over.
func TestMemoryQoSReport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cgroups  cgroup.Prober
		policies []string
		want     knob.State // of every Anolis key of lsClass once configured
		wantLog  bool
	}{
		{name: "Anolis v1", cgroups: fakeCgroups(t, append([]string{"memory.min", "memory.low", "memory.high"}, anolisFiles...)...),
			policies: policy.Names(), want: knob.Applied},
		{name: "mainline v1", cgroups: fakeCgroups(t), policies: policy.Names(), want: knob.Ignored, wantLog: true},
		{name: "no cgroup hierarchy", policies: policy.Names(), want: knob.Ignored, wantLog: true},
		{name: "memoryqos not in --policies", cgroups: fakeCgroups(t), policies: []string{"qos", "cpuset"}, want: knob.Off},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := policy.DefaultConfig()
			base.Enabled = tt.policies
			cons, ctx, logs := newMemoryQoSConsumers(t, base)
			cons.add(ctx, newMemoryQoS(cons, tt.cgroups))
			reports := cons.knobReports()
			if len(reports) != 1 {
				t.Fatalf("%d reports registered, want 1", len(reports))
			}
			// Tandem's defaults: every class off.
			if s := byKey(reports[0])["lsClass.memoryQOS.wmarkRatio"]; s.State != knob.Off {
				t.Fatalf("before any configuration lsClass.memoryQOS.wmarkRatio = %s (%s), want off", s.State, s.Detail)
			}
			r := resolve(t, map[string]string{slo.ResourceQOSConfigKey: memoryQOSConfig})
			for range 2 { // the same configuration twice: one log line
				cons.apply(ctx, source.Update{Resolved: r})
			}
			got := byKey(cons.knobReports()[0])
			for _, key := range []string{"wmarkRatio", "wmarkScalePermill", "wmarkMinAdj", "priorityEnable", "priority", "oomKillGroup"} {
				if s := got["lsClass.memoryQOS."+key]; s.State != tt.want {
					t.Errorf("lsClass.memoryQOS.%s = %s (%s), want %s", key, s.State, s.Detail, tt.want)
				}
			}
			if s := got["lsClass.memoryQOS.pageCacheLimitEnable"]; s.State != knob.Unsupported {
				t.Errorf("pageCacheLimitEnable = %s, want unsupported", s.State)
			}
			if s := got["beClass.memoryQOS.wmarkRatio"]; s.State != knob.Off {
				t.Errorf("beClass.memoryQOS.wmarkRatio = %s, want off (beClass disabled)", s.State)
			}
			n := strings.Count(logs(), "Memory QoS settings ignored")
			if !tt.wantLog {
				if n != 0 {
					t.Fatalf("logged %d ignored-settings lines, want none:\n%s", n, logs())
				}
				return
			}
			if n != 1 {
				t.Fatalf("logged %d ignored-settings lines, want 1:\n%s", n, logs())
			}
			for _, f := range anolisFiles {
				if !strings.Contains(logs(), f) {
					t.Errorf("the log line does not name %s:\n%s", f, logs())
				}
			}
		})
	}
}

// TestMemoryQoSReportCoversTheTable: every memoryQOS key of the slo-config is one this report states, so
// no key keeps the table's placeholder for reported keys.
func TestMemoryQoSReportCoversTheTable(t *testing.T) {
	t.Parallel()
	r := resolve(t, map[string]string{slo.ResourceQOSConfigKey: memoryQOSConfig})
	cgroups := fakeCgroups(t)
	base := policy.DefaultConfig()
	cons, ctx, _ := newMemoryQoSConsumers(t, base)
	cons.apply(ctx, source.Update{Resolved: r})
	cons.add(ctx, newMemoryQoS(cons, cgroups))
	ours := byKey(cons.knobReports()[0])
	var n int
	for _, s := range baseKnobs(r, nodeFacts{cgroups: cgroups, policies: base.Enabled}) {
		if s.Section != slo.ResourceQOSConfigKey || !strings.Contains(s.Key, ".memoryQOS.") {
			continue
		}
		n++
		o, ok := ours[s.Key]
		if !ok {
			t.Errorf("%s is in the slo-config but not in the memory QoS report", s.Key)
			continue
		}
		if o.Value != s.Value {
			t.Errorf("%s: the report says %s, the configuration in force %s", s.Key, o.Value, s.Value)
		}
	}
	if n == 0 || n != len(ours) {
		t.Fatalf("the slo-config has %d memoryQOS keys, the report %d", n, len(ours))
	}
}

// TestMemoryQoSReportThisHost runs the report on this machine's real cgroup hierarchy. On mainline cgroup
// v1 (as here) every Anolis key configured is ignored, naming its file; elsewhere each key follows the
// file the kernel offers.
func TestMemoryQoSReportThisHost(t *testing.T) {
	t.Parallel()
	w, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cgroup hierarchy here: %v", err)
	}
	cons, ctx, _ := newMemoryQoSConsumers(t, policy.DefaultConfig())
	cons.apply(ctx, source.Update{Resolved: resolve(t, map[string]string{slo.ResourceQOSConfigKey: memoryQOSConfig})})
	cons.add(ctx, newMemoryQoS(cons, w))
	got := byKey(cons.knobReports()[0])
	files := map[string]string{"wmarkRatio": "memory.wmark_ratio", "wmarkScalePermill": "memory.wmark_scale_factor",
		"wmarkMinAdj": "memory.wmark_min_adj", "priorityEnable": "memory.use_priority_oom", "priority": "memory.priority",
		"oomKillGroup": "memory.oom.group", "minLimitPercent": "memory.min", "throttlingPercent": "memory.high"}
	for key, file := range files {
		s := got["lsClass.memoryQOS."+key]
		want := knob.Ignored
		if w.Supports(file) {
			want = knob.Applied
		}
		if s.State != want || (want == knob.Ignored && !strings.Contains(s.Detail, file)) {
			t.Errorf("lsClass.memoryQOS.%s = %s (%s), want %s naming %s", key, s.State, s.Detail, want, file)
		}
	}
	if missing := memoryqos.Missing(policy.FromSLO(policy.DefaultConfig(), cons.resolved).MemoryQoS, w); w.Version() == 1 && !w.Supports("memory.min") &&
		!slices.Contains(missing, "memory.wmark_ratio") {
		t.Errorf("Missing on mainline cgroup v1 = %v, want memory.wmark_ratio among them", missing)
	}
}
