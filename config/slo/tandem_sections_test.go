package slo

import (
	"strings"
	"testing"
)

func TestTandemSections(t *testing.T) {
	data := map[string]string{
		BatchWindowConfigKey: `{"enable": true, "timeZone": "Asia/Shanghai",
		  "windows": [{"name": "night", "days": ["Mon","Tue","Wed","Thu","Fri"], "start": "22:00", "end": "07:00"}],
		  "stopPlacementBeforeCloseSeconds": 1800,
		  "nodeConfigs": [{"name": "gpu", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "outsideCapacityPercent": 30}]}`,
		DryRunConfigKey: `{"evict": true, "nodeConfigs": [{"name": "canary", "nodeSelector": {"matchLabels": {"pool": "gpu"}}, "suppress": true, "windowEvict": true}]}`,
	}
	cfg := Parse(data)
	if r := cfg.Refused(); len(r) > 0 {
		t.Fatalf("refused: %v", r)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	plain, err := cfg.ForNode(map[string]string{"pool": "web"})
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := cfg.ForNode(map[string]string{"pool": "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	w := plain.BatchWindows
	if !w.Enable || w.TimeZone != "Asia/Shanghai" || len(w.Windows) != 1 || w.StopPlacementBeforeCloseSeconds != 1800 || w.EvictionGraceSeconds != 600 || w.OutsideCapacityPercent != 0 {
		t.Errorf("cluster strategy: %+v", w)
	}
	if g := gpu.BatchWindows; g.OutsideCapacityPercent != 30 || len(g.Windows) != 1 || g.StopPlacementBeforeCloseSeconds != 1800 {
		t.Errorf("node strategy keeps what it does not write and overrides what it does: %+v", g)
	}
	if d := plain.DryRun; !d.Evict || d.Suppress || d.WindowEvict || d.CFSQuotaBurst {
		t.Errorf("dry run, cluster: %+v", d)
	}
	if d := gpu.DryRun; !d.Evict || !d.Suppress || !d.WindowEvict {
		t.Errorf("dry run, node: %+v", d)
	}
}

func TestTandemSectionsRefused(t *testing.T) {
	cases := []struct {
		name, key, value string
		want             []string
	}{
		{"typo", DryRunConfigKey, `{"evcit": true}`, []string{"dry-run-config.evcit", "unknown"}},
		{"bad zone", BatchWindowConfigKey, `{"enable": true, "timeZone": "Asia/Beijing"}`, []string{"batch-window-config.timeZone", "IANA"}},
		{"bad time in a node config", BatchWindowConfigKey, `{"enable": true, "windows": [{"start": "22:00", "end": "07:00"}],
		  "nodeConfigs": [{"name": "x", "nodeSelector": {"matchLabels": {"a": "b"}}, "windows": [{"start": "25:00", "end": "07:00"}]}]}`,
			[]string{"batch-window-config.nodeConfigs[0].windows[0].start", "HH:MM"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Parse(map[string]string{tc.key: tc.value})
			var msg string
			for _, r := range cfg.Refused() {
				msg += r.Error() + "\n"
			}
			if err := cfg.Validate(); err != nil {
				msg += err.Error()
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q does not say %q", msg, w)
				}
			}
		})
	}
}
