package policy

import (
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/hooks/policy/memoryqos"
	"github.com/tandemkit/tandem/hooks/policy/resctrl"
	resqos "github.com/tandemkit/tandem/resource/qos"
)

// FromSLO returns base with the policies' knobs taken from a Koordinator slo-controller-config resolved
// for this node: cpu-burst-config for cpuburst; resource-qos-config's per-class cpuQOS (group identity),
// memoryQOS and resctrlQOS for cpuidle, memoryqos and resctrl. Which policies run stays base's choice.
func FromSLO(base Config, r slo.Resolved) Config {
	out := base
	out.CPUBurst = cpuburst.Config(r.CPUBurst)
	q := r.ResourceQOS
	// memoryqos's class configuration is memoryQOS field for field; cgroupRoot's is carried to be reported.
	mem := func(c slo.ClassSettings) memoryqos.ClassConfig { return memoryqos.ClassConfig(c.MemoryQOS) }
	out.MemoryQoS = memoryqos.Config{LSRClass: mem(q.LSR), LSClass: mem(q.LS), BEClass: mem(q.BE), SystemClass: mem(q.System),
		CgroupRoot: mem(q.CgroupRoot)}
	// resctrl's class configuration is resctrlQOS field for field.
	out.Resctrl = resctrl.Config{LSRClass: resctrl.ClassConfig(q.LSR.ResctrlQOS), LSClass: resctrl.ClassConfig(q.LS.ResctrlQOS),
		BEClass: resctrl.ClassConfig(q.BE.ResctrlQOS)}
	// Group identity only where the operator enabled CPU QoS for the class; LSE follows LSR, as in
	// Koordinator.
	gi := map[resqos.Class]int64{}
	for _, class := range []resqos.Class{resqos.LSE, resqos.LSR, resqos.LS, resqos.BE} {
		if c, _ := q.Class(class); c.CPUQOS.Enable {
			gi[class] = c.CPUQOS.GroupIdentity
		}
	}
	out.CPUIdle.GroupIdentity = gi
	return out
}
