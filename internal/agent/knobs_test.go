package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/utils/ptr"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks/policy"
)

type fakeProber map[string]bool

func (p fakeProber) Version() int              { return 1 }
func (p fakeProber) Supports(file string) bool { return p[file] }

// TestKnobRulesCoverEveryKey fails when config/slo gains a key this table does not place: a key nobody
// reports would be parsed and dropped without the operator knowing.
func TestKnobRulesCoverEveryKey(t *testing.T) {
	t.Parallel()
	r, err := slo.DefaultConfig().ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := baseKnobs(r, nodeFacts{})
	if len(keys) < 100 {
		t.Fatalf("only %d keys listed; the walk over the sections is broken", len(keys))
	}
	for _, s := range keys {
		if s.Detail == "no rule says what Tandem does with it" {
			t.Errorf("%s %s has no rule in knobRules", s.Section, s.Key)
		}
	}
}

// TestBaseKnobs: the states an operator reads for a few keys, as the configuration and the node decide.
func TestBaseKnobs(t *testing.T) {
	t.Parallel()
	base, err := slo.DefaultConfig().ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	on := base
	on.Colocation.Enable = true
	on.ResourceQOS.LS.CPUQOS.Enable = true
	on.ResourceQOS.BE.CPUQOS.YieldThreads = true
	on.ResourceQOS.BE.ResctrlQOS.Enable = true
	mainline := nodeFacts{cgroups: fakeProber{"cpu.idle": true}, yield: true, policies: []string{"cpuidle", "resctrl"}}
	anolis := nodeFacts{cgroups: fakeProber{"cpu.idle": true, "cpu.bvt_warp_ns": true}, resctrl: true, policies: []string{"cpuidle", "resctrl"}}
	vm := mainline
	vm.vm, vm.vmWhy = true, "/proc/cpuinfo has the hypervisor flag"
	blkioOn := base
	blkioOn.ResourceQOS.BE.BlkIOQOS = slo.BlkIOQOSSettings{Enable: true, Blocks: []slo.BlockConfig{{Name: "/dev/vdb", BlockType: "device", IOCfg: slo.BlockIOConfig{ReadBPS: ptr.To[int64](1 << 20)}}}}
	cfsQuota := base
	cfsQuota.ResourceThreshold.Enable, cfsQuota.ResourceThreshold.CPUSuppressPolicy = true, slo.CPUSuppressByCFSQuota
	cpusetOn := base
	cpusetOn.ResourceThreshold.Enable = true
	stealOn := base
	stealOn.ResourceThreshold.StealHeadroom = slo.StealHeadroomOn
	guardOn := base
	guardOn.ResourceThreshold.LSWaitGuard = true
	withRunQueue := mainline
	withRunQueue.runQueue = true
	tests := []struct {
		name         string
		r            slo.Resolved
		facts        nodeFacts
		section, key string
		want         knob.State
		wantValue    string
	}{
		{"colocation off", base, mainline, "colocation-config", "cpuReclaimThresholdPercent", knob.Off, "60"},
		{"colocation on", on, mainline, "colocation-config", "cpuReclaimThresholdPercent", knob.Applied, "60"},
		{"colocation switched off", base, mainline, "colocation-config", "enable", knob.Off, "false"},
		{"colocation switched on", on, mainline, "colocation-config", "enable", knob.Applied, "true"},
		{"mid tier is not published", on, mainline, "colocation-config", "midCPUThresholdPercent", knob.Unsupported, "100"},
		{"group identity on mainline", on, mainline, "resource-qos-config", "lsClass.cpuQOS.groupIdentity", knob.Ignored, "2"},
		{"group identity on Anolis", on, anolis, "resource-qos-config", "lsClass.cpuQOS.groupIdentity", knob.Applied, "2"},
		{"group identity of a disabled class", base, anolis, "resource-qos-config", "lsClass.cpuQOS.groupIdentity", knob.Off, "2"},
		{"cpuQOS of the system class", on, anolis, "resource-qos-config", "systemClass.cpuQOS.enable", knob.Unsupported, "false"},
		{"yield off by default", base, mainline, "resource-qos-config", "beClass.cpuQOS.yieldThreads", knob.Off, "false"},
		{"yield where the kernel has slices", on, mainline, "resource-qos-config", "beClass.cpuQOS.yieldThreads", knob.Applied, "true"},
		{"yield where it has not", on, anolis, "resource-qos-config", "beClass.cpuQOS.yieldThreads", knob.Ignored, "true"},
		{"resctrl without the filesystem", on, mainline, "resource-qos-config", "beClass.resctrlQOS.mbaPercent", knob.Ignored, "100"},
		{"resctrl with it", on, anolis, "resource-qos-config", "beClass.resctrlQOS.mbaPercent", knob.Applied, "100"},
		{"blkio of BE off by default", on, anolis, "resource-qos-config", "beClass.blkioQOS.enable", knob.Off, "false"},
		{"blkio of BE without its loop", blkioOn, anolis, "resource-qos-config", "beClass.blkioQOS.blocks", knob.Ignored, `[{"name":"/dev/vdb","type":"device","ioCfg":{"readBPS":1048576}}]`},
		{"blkio of BE without cgroups", blkioOn, nodeFacts{}, "resource-qos-config", "beClass.blkioQOS.enable", knob.Ignored, "true"},
		{"blkio of LS is not Koordinator's", blkioOn, anolis, "resource-qos-config", "lsClass.blkioQOS.enable", knob.Unsupported, "false"},
		{"blkio of the root's iocost model", blkioOn, anolis, "resource-qos-config", "cgroupRoot.blkioQOS.enable", knob.Unsupported, "false"},
		{"LS wait guard off by default", base, withRunQueue, "resource-threshold-config", "lsWaitGuard", knob.Off, "false"},
		{"LS wait guard without the run-queue collector", guardOn, mainline, "resource-threshold-config", "lsWaitGuard", knob.Ignored, "true"},
		{"LS wait guard with it", guardOn, withRunQueue, "resource-threshold-config", "lsWaitThresholdMicros", knob.Applied, "4000"},
		{"burst without its reporter", on, anolis, "cpu-burst-config", "policy", knob.Ignored, `"none"`},
		{"steal headroom on a VM", base, vm, "resource-threshold-config", "stealHeadroom", knob.Applied, `"auto"`},
		{"steal headroom on bare metal", base, mainline, "resource-threshold-config", "stealHeadroom", knob.Off, `"auto"`},
		{"steal headroom forced on bare metal", stealOn, mainline, "resource-threshold-config", "stealThresholdPercent", knob.Applied, "5"},
		{"steal headroom without cgroups", stealOn, nodeFacts{}, "resource-threshold-config", "stealHeadroom", knob.Ignored, `"on"`},
		{"BE quota period: the steal headroom keeps 100 ms", base, vm, "resource-threshold-config", "beCFSPeriodMicros", knob.Off, "1000000"},
		{"BE quota period with nothing to quota", base, mainline, "resource-threshold-config", "beCFSPeriodMicros", knob.Off, "1000000"},
		{"BE quota period of cfsQuota suppression", cfsQuota, mainline, "resource-threshold-config", "beCFSPeriodMicros", knob.Applied, "1000000"},
		{"BE quota period under cpuset suppression", cpusetOn, vm, "resource-threshold-config", "beCFSPeriodMicros", knob.Off, "1000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range baseKnobs(tt.r, tt.facts) {
				if s.Section == tt.section && s.Key == tt.key {
					if s.State != tt.want || s.Value != tt.wantValue {
						t.Fatalf("%s %s = %s (%s) value %s; want %s value %s", tt.section, tt.key, s.State, s.Detail, s.Value, tt.want, tt.wantValue)
					}
					return
				}
			}
			t.Fatalf("%s %s not listed", tt.section, tt.key)
		})
	}
}

// TestConfigEndpointSaysRefused: a section the configuration refused is one row saying so, with the
// reason, above its keys (which show the last good values); the reports of the parts acting on keys are
// laid over the table.
func TestConfigEndpointSaysRefused(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	cfg := slo.Parse(map[string]string{
		slo.ColocationConfigKey: `{"enable": true}`,
		slo.SystemConfigKey:     `{"clusterStrategy": {"minFreeKbytesFactor": 100} "nodeStrategies": []}`,
	})
	r, err := cfg.ForNode(nil)
	if err != nil {
		t.Fatal(err)
	}
	defaults := resolve(t, nil)
	colocation := &atomic.Pointer[slo.Resolved]{}
	colocation.Store(&defaults)
	cons := &consumers{base: policy.DefaultConfig(), colocation: colocation, resolved: defaults}
	cons.add(ctx, &loop{name: "system-config", knobs: knob.ReporterFunc(func() []knob.Status {
		return []knob.Status{{Section: slo.SystemConfigKey, Key: "minFreeKbytesFactor", State: knob.Off, Detail: "unset"}}
	})})
	cons.apply(ctx, source.Update{Config: cfg, Resolved: r, Origin: "test"})
	rec := httptest.NewRecorder()
	configHandler("node-a", cons, nodeFacts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/config", nil))
	var rep knobsReport
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	find := func(section, key string) knob.Status {
		for _, s := range rep.Keys {
			if s.Section == section && s.Key == key {
				return s
			}
		}
		t.Fatalf("%s %q not in /debug/config", section, key)
		return knob.Status{}
	}
	if s := find(slo.SystemConfigKey, ""); s.State != knob.Refused || !strings.Contains(s.Detail, "line 1") {
		t.Errorf("refused system-config row = %+v, want refused with the parse error's position", s)
	}
	if s := find(slo.SystemConfigKey, "minFreeKbytesFactor"); s.State != knob.Off {
		t.Errorf("minFreeKbytesFactor = %+v, want the reporter's off", s)
	}
	if s := find(slo.ColocationConfigKey, "cpuReclaimThresholdPercent"); s.State != knob.Applied {
		t.Errorf("colocation key of an enabled section = %+v, want applied", s)
	}
	if rep.Node != "node-a" {
		t.Errorf("node %q", rep.Node)
	}
}
