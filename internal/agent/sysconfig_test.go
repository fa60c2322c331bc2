package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/internal/polltest"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/resource/sysconfig"
)

// The agent's system-config loop on a temporary proc and sys tree (Anolis's memcg_reaper included): the
// real /proc/sys is e2e/sysconfig_test.go's, against a real tandem-proxy.

const seedSystemConfig = `{"clusterStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 1, "schedGroupIdentityEnabled": 1}}`

type sysTree struct {
	cfg   sysconfig.Config
	files map[string]string // name → path
}

func newSysTree(t *testing.T) sysTree {
	t.Helper()
	dir := t.TempDir()
	tr := sysTree{
		cfg: sysconfig.Config{ProcRoot: filepath.Join(dir, "proc"), SysRoot: filepath.Join(dir, "sys"), Record: filepath.Join(dir, "state", sysconfigRecord)},
		files: map[string]string{
			"min_free_kbytes":        filepath.Join(dir, "proc/sys/vm/min_free_kbytes"),
			"watermark_scale_factor": filepath.Join(dir, "proc/sys/vm/watermark_scale_factor"),
			"reap_background":        filepath.Join(dir, "sys/kernel/mm/memcg_reaper/reap_background"),
			"group_identity":         filepath.Join(dir, "proc/sys/kernel/sched_group_identity_enabled"),
		},
	}
	for path, v := range map[string]string{
		filepath.Join(dir, "proc/meminfo"): "MemTotal:       16777216 kB\n",
		tr.files["min_free_kbytes"]:        "67584\n",
		tr.files["watermark_scale_factor"]: "10\n",
		tr.files["reap_background"]:        "0\n",
		tr.files["group_identity"]:         "0\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

var (
	sysOriginals = map[string]string{"min_free_kbytes": "67584", "watermark_scale_factor": "10", "reap_background": "0", "group_identity": "0"}
	sysSeed      = map[string]string{"min_free_kbytes": "167772", "watermark_scale_factor": "150", "reap_background": "1", "group_identity": "1"}
)

// waitFiles waits until every file holds its value.
func (tr sysTree) waitFiles(t *testing.T, step string, want map[string]string) {
	t.Helper()
	var got map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		got = map[string]string{}
		for name, path := range tr.files {
			b, err := os.ReadFile(path)
			if err != nil {
				return false, err
			}
			got[name] = strings.TrimSpace(string(b))
		}
		for name, v := range want {
			if got[name] != v {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: files hold %v, want %v: %v", step, got, want, err)
	}
}

// waitUnrecorded waits until the record of originals is gone.
func (tr sysTree) waitUnrecorded(t *testing.T, failure string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return !tr.recorded(), nil
	})
	if err != nil {
		t.Fatalf("%s: %s still there: %v", failure, tr.cfg.Record, err)
	}
}

func (tr sysTree) recorded() bool {
	_, err := os.Stat(tr.cfg.Record)
	return err == nil
}

func knobsByKey(r knob.Reporter) map[string]knob.Status {
	out := map[string]knob.Status{}
	for _, s := range r.Knobs() {
		out[s.Key] = s
	}
	return out
}

// startSys starts the loop as run() does, on tr; the returned stop ends the agent and waits for it.
func startSys(t *testing.T, tr sysTree, expected bool, reg prometheus.Registerer) (*consumers, func()) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	loops, err := supervise.New(ctx, nil, supervise.Backoff())
	if err != nil {
		t.Fatal(err)
	}
	cons := &consumers{colocation: &atomic.Pointer[slo.Resolved]{}, firstApplied: make(chan struct{})}
	c, err := newSysConfig(ctx, tr.cfg, cons.first(expected), reg)
	if err != nil {
		t.Fatal(err)
	}
	cons.add(ctx, c)
	c.Start(ctx, loops)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			loops.Wait()
			cons.restore(ctx, restoreTimeout)
		}
	}
	t.Cleanup(stop)
	return cons, stop
}

func TestSysConfigFollowsSLO(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	tr := newSysTree(t)
	reg := prometheus.NewRegistry()
	cons, stop := startSys(t, tr, true, reg)
	rep := cons.comps[0].(knob.Reporter)

	// Before the first configuration: nothing written, and Knobs says so.
	time.Sleep(50 * time.Millisecond) // time must pass: a write that must not happen gets its chance
	tr.waitFiles(t, "before the first configuration", sysOriginals)
	if k := knobsByKey(rep)["minFreeKbytesFactor"]; k.State != knob.Off || !strings.Contains(k.Detail, "waiting") {
		t.Fatalf("before the first configuration: %+v, want off, waiting", k)
	}

	seed := resolve(t, map[string]string{slo.SystemConfigKey: seedSystemConfig})
	cons.apply(ctx, source.Update{Resolved: seed, Origin: "test"})
	tr.waitFiles(t, "the operator's system-config", sysSeed)
	if !tr.recorded() {
		t.Fatal("no record of the originals after the first write")
	}
	knobs := knobsByKey(rep)
	for key, want := range map[string]knob.Status{
		"minFreeKbytesFactor":       {Value: "100", State: knob.Applied},
		"watermarkScaleFactor":      {Value: "150", State: knob.Applied},
		"memcgReapBackGround":       {Value: "1", State: knob.Applied},
		"pageCacheLimitEnabled":     {State: knob.Unsupported},
		"schedGroupIdentityEnabled": {Value: "1", State: knob.Applied},
		"schedIdleSaverWmark":       {State: knob.Unsupported},
		"schedFeatures":             {State: knob.Unsupported},
		"totalNetworkBandwidth":     {State: knob.Unsupported},
	} {
		got := knobs[key]
		if got.Section != slo.SystemConfigKey || got.State != want.State || got.Value != want.Value {
			t.Errorf("knob %s = %+v, want section system-config, state %s, value %q", key, got, want.State, want.Value)
		}
	}
	if len(knobs) != 8 {
		t.Errorf("%d system-config keys reported, want 8: %v", len(knobs), knobs)
	}
	// The gauges are set once Apply has written every file, a moment after the last one lands.
	waitGauge(t, reg, "tandem_sysconfig_value", tr.files["min_free_kbytes"], 167772)

	// Another section changes: the values stay, nothing is written again.
	other := resolve(t, map[string]string{slo.SystemConfigKey: seedSystemConfig, slo.CPUBurstConfigKey: `{"clusterStrategy": {"policy": "auto"}}`})
	cons.apply(ctx, source.Update{Resolved: other, Origin: "test"})
	tr.waitFiles(t, "another section", sysSeed)

	// The section removed: the originals are back, the record gone.
	cons.apply(ctx, source.Update{Resolved: resolve(t, nil), Origin: "test"})
	tr.waitFiles(t, "section removed", sysOriginals)
	// The record goes once the last file is back, a moment after that file lands.
	tr.waitUnrecorded(t, "record left after every original was restored")
	if k := knobsByKey(rep)["watermarkScaleFactor"]; k.State != knob.Off {
		t.Fatalf("after the section was removed: %+v, want off", k)
	}

	// Applied again, then the agent stops: the originals are back when its loops have ended.
	cons.apply(ctx, source.Update{Resolved: seed, Origin: "test"})
	tr.waitFiles(t, "the operator's system-config again", sysSeed)
	stop()
	tr.waitFiles(t, "stopped", sysOriginals)
	if tr.recorded() {
		t.Fatal("record left after the agent stopped")
	}
}

// waitGauge waits until the gauge name whose one label has value label holds want in reg.
func waitGauge(t *testing.T, reg *prometheus.Registry, name, label string, want float64) {
	t.Helper()
	polltest.Within(t, 5*time.Second, fmt.Sprintf("%s{%s} = %v", name, label, want), func() bool {
		got, found := gauge(t, reg, name, label)
		return found && got == want
	})
}

func gauge(t *testing.T, reg *prometheus.Registry, name, label string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestSysConfigAfterKill: a run that was SIGKILLed left Tandem's values and the record; the next run
// restores the originals from the record, whether the configuration no longer sets the keys, never comes,
// or there is no source at all.
func TestSysConfigAfterKill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		expected bool
		// configure: the first configuration of the new run; nil: none comes.
		configure map[string]string
		// beforeStop: the files while the new run runs.
		beforeStop map[string]string
	}{
		{name: "the section still there, then stopped", expected: true,
			configure: map[string]string{slo.SystemConfigKey: seedSystemConfig}, beforeStop: sysSeed},
		{name: "the section removed meanwhile", expected: true, configure: map[string]string{}, beforeStop: sysOriginals},
		{name: "no configuration comes before the stop", expected: true, beforeStop: sysSeed},
		{name: "no source: the defaults apply at once", expected: false, beforeStop: sysOriginals},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			tr := newSysTree(t)
			// The killed run: it wrote and recorded, and never restored.
			killed, err := sysconfig.New(tr.cfg)
			if err != nil {
				t.Fatal(err)
			}
			one, v150 := int64(1), int64(150)
			hundred := int64(100)
			killed.Apply(ctx, sysconfig.Want{MinFreeKbytesFactor: &hundred, WatermarkScaleFactor: &v150, MemcgReapBackGround: &one, SchedGroupIdentityEnabled: &one})
			tr.waitFiles(t, "killed run", sysSeed)

			cons, stop := startSys(t, tr, tc.expected, nil)
			if tc.configure != nil {
				cons.apply(ctx, source.Update{Resolved: resolve(t, tc.configure), Origin: "test"})
			}
			time.Sleep(50 * time.Millisecond) // time must pass: a wrong restore or write gets its chance
			tr.waitFiles(t, "new run", tc.beforeStop)
			stop()
			tr.waitFiles(t, "stopped", sysOriginals)
			if tr.recorded() {
				t.Fatal("record left after the stop")
			}
		})
	}
}

// TestSysConfigBadRecord: a record that cannot be read stops Tandem from writing; every key says why.
func TestSysConfigBadRecord(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	tr := newSysTree(t)
	if err := os.MkdirAll(filepath.Dir(tr.cfg.Record), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tr.cfg.Record, []byte("{truncated"), 0o600); err != nil {
		t.Fatal(err)
	}
	cons, stop := startSys(t, tr, true, nil)
	cons.apply(ctx, source.Update{Resolved: resolve(t, map[string]string{slo.SystemConfigKey: seedSystemConfig}), Origin: "test"})
	time.Sleep(50 * time.Millisecond) // time must pass: a write the bad record must prevent gets its chance
	stop()
	tr.waitFiles(t, "bad record", sysOriginals)
	k := knobsByKey(cons.comps[0].(knob.Reporter))["minFreeKbytesFactor"]
	if k.State != knob.Refused || !strings.Contains(k.Detail, tr.cfg.Record) {
		t.Fatalf("with a bad record: %+v, want refused naming the record", k)
	}
}
