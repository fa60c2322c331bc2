package policy

import (
	"os"
	"testing"

	"github.com/tandemkit/tandem/config/slo"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// TestFromSeed004 maps an operator's own slo-controller-config, as it runs under Koordinator, onto the
// policies, for an Anolis node and a plain one: moving the node to Tandem must keep what it asked for.
func TestFromSeed004(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../config/slo/testdata/seed004.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := slo.ParseFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, labels := range []map[string]string{{"kubernetes.io/kernel": "anolis"}, {}} {
		r, err := cfg.ForNode(labels)
		if err != nil {
			t.Fatal(err)
		}
		got := FromSLO(DefaultConfig(), r)
		if err := got.Validate(); err != nil {
			t.Fatalf("mapped config invalid: %v", err)
		}
		// The operator keeps CPU QoS, memory QoS and RDT off for every class: nothing may be switched on.
		if len(got.CPUIdle.GroupIdentity) != 0 || got.MemoryQoS.LSClass.Enable || got.Resctrl.BEClass.Enable {
			t.Fatalf("labels %v: the operator disables these, mapped %+v", labels, got)
		}
		if got.CPUBurst.Policy != r.CPUBurst.Policy || got.CPUBurst.CPUBurstPercent != r.CPUBurst.CPUBurstPercent {
			t.Fatalf("cpu burst = %+v, want %+v", got.CPUBurst, r.CPUBurst)
		}
	}
	// An operator who enables CPU QoS gets group identity by class.
	enabled := slo.Resolved{}
	enabled.ResourceQOS.LSR.CPUQOS = slo.CPUQOSSettings{Enable: true, GroupIdentity: 2}
	enabled.ResourceQOS.BE.CPUQOS = slo.CPUQOSSettings{Enable: true, GroupIdentity: -1}
	gi := FromSLO(DefaultConfig(), enabled).CPUIdle.GroupIdentity
	if gi[resqos.LSE] != 2 || gi[resqos.LSR] != 2 || gi[resqos.BE] != -1 {
		t.Fatalf("group identity = %v", gi)
	}
	if _, ok := gi[resqos.LS]; ok {
		t.Fatal("LS group identity set although LS CPU QoS is off")
	}
}
