package quotaburst

import (
	"encoding/json"
	"fmt"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// Section is the slo-controller-config key this package reports on.
const Section = "cpu-burst-config"

// Knobs reports cpu-burst-config's keys for the configuration in force.
func (l *Loop) Knobs() []knob.Status {
	cfg, refused := l.config()
	out := Knobs(cfg, l.deps.Cgroups, refused)
	if l.DryRun() {
		for i := range out {
			if out[i].Key != "cpuBurstPercent" && out[i].Key != "policy" && out[i].State == knob.Applied {
				out[i].Detail += "; dry run (dry-run-config cfsQuotaBurst): decided and reported as WouldBurstQuota Events, not written"
			}
		}
	}
	return out
}

// Knobs says what each key of cpu-burst-config does on a node whose cgroups are cg (nil: none) under cfg:
// the CFS burst (cpuBurstPercent) is the cpuburst policy's, on where the kernel has the burst file; the
// CFS quota burst's keys are this loop's. refused is the error that refused the latest configuration, if
// any: cfg is then the one still in force.
func Knobs(cfg cpuburst.Config, cg cgroup.Prober, refused error) []knob.Status {
	st := func(key string, v any, state knob.State, detail string) knob.Status {
		b, _ := json.Marshal(v)
		return knob.Status{Section: Section, Key: key, Value: string(b), State: state, Detail: detail}
	}
	var out []knob.Status
	switch {
	case cfg.Policy == cpuburst.PolicyNone:
		out = append(out, st("policy", cfg.Policy, knob.Off, "neither the CFS burst nor the CFS quota burst runs"))
	default:
		out = append(out, st("policy", cfg.Policy, knob.Applied, policyDetail(cfg)))
	}
	burst := st("cpuBurstPercent", cfg.CPUBurstPercent, knob.Off, fmt.Sprintf("policy %s sets no CFS burst (cpuBurstOnly and auto do)", cfg.Policy))
	if cfg.SetsBurst() {
		if cg == nil {
			burst.State, burst.Detail = knob.Ignored, "no cgroup hierarchy: cpu.cfs_burst_us cannot be written"
		} else if file, ok := cpuburst.BurstFile(cg); ok {
			burst.State, burst.Detail = knob.Applied, fmt.Sprintf("%s of LS containers and pods = %d%% of their CFS quota, at most the quota", file, cfg.CPUBurstPercent)
		} else {
			burst.State, burst.Detail = knob.Ignored, "the kernel offers no "+file+" (CFS burst needs Linux 5.14+)"
		}
	}
	out = append(out, burst)
	quota := []struct {
		key    string
		v      int64
		detail string
	}{
		{"cfsQuotaBurstPercent", cfg.CFSQuotaBurstPercent, fmt.Sprintf("a throttled LS container's CFS quota grows by a fifth per sample up to %d%% of its limit's", cfg.CFSQuotaBurstPercent)},
		{"cfsQuotaBurstPeriodSeconds", cfg.CFSQuotaBurstPeriodSeconds, periodDetail(cfg.CFSQuotaBurstPeriodSeconds)},
		{"sharePoolThresholdPercent", cfg.SharePoolThresholdPercent, fmt.Sprintf("raised quotas go back to their base while the shared pool's usage is at or above %d%%; none grows from %d%%",
			cfg.SharePoolThresholdPercent, cfg.SharePoolThresholdPercent*9/10)},
	}
	for _, q := range quota {
		s := st(q.key, q.v, knob.Applied, q.detail)
		switch {
		case refused != nil:
			s.State, s.Detail = knob.Refused, refused.Error()+"; the settings in force stay"
		case !cfg.RaisesQuota():
			s.State, s.Detail = knob.Off, fmt.Sprintf("policy %s runs no CFS quota burst (cfsQuotaBurstOnly and auto do)", cfg.Policy)
		case cg == nil:
			s.State, s.Detail = knob.Ignored, "no cgroup hierarchy: cpu.cfs_quota_us cannot be written"
		}
		out = append(out, s)
	}
	return out
}

func policyDetail(cfg cpuburst.Config) string {
	switch cfg.Policy {
	case cpuburst.PolicyCPUBurstOnly:
		return "the CFS burst only (cpu.cfs_burst_us)"
	case cpuburst.PolicyCFSQuotaBurstOnly:
		return "the CFS quota burst only (cpu.cfs_quota_us raised while the shared pool is idle)"
	default:
		return "the CFS burst and the CFS quota burst"
	}
}

func periodDetail(s int64) string {
	switch {
	case s < 0:
		return "a raise lasts as long as the shared pool stays idle"
	case s == 0:
		return "no raise at all"
	default:
		return fmt.Sprintf("a raise lasts at most %d s; the next needs the container to run a sample unthrottled first", s)
	}
}
