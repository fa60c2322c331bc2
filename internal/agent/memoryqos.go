package agent

import (
	"context"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/memoryqos"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// newMemoryQoS reports what each memoryQOS key of resource-qos-config does on this node (tandemctl
// config), from the configuration the built-in policies run with and the files the kernel offers, and logs
// one line whenever the configuration in force sets files this kernel lacks. The memoryqos hook itself
// returns only the files the kernel offers; this is where an operator learns about the rest.
func newMemoryQoS(cons *consumers, cgroups cgroup.Prober) component {
	var last string // the settings last logged as ignored; read and written under cons.mu
	// Configure runs under cons.mu, which memoryQoSLocked needs.
	configure := func(ctx context.Context, _ slo.Resolved) error {
		cfg, on := cons.memoryQoSLocked()
		var missing []string
		if on {
			missing = memoryqos.Missing(cfg, cgroups)
		}
		var keys []string
		for _, s := range memoryQoSKnobs(cfg, on, cgroups) {
			if s.State == knob.Ignored && !strings.HasSuffix(s.Key, ".enable") {
				keys = append(keys, s.Key)
			}
		}
		now := strings.Join(keys, ",")
		if now == last {
			return nil
		}
		last = now
		logger := klog.FromContext(ctx)
		if len(keys) == 0 {
			logger.V(2).Info("Every memory QoS setting in force has its cgroup file on this node")
			return nil
		}
		version := 0
		if cgroups != nil {
			version = cgroups.Version()
		}
		logger.Info("Memory QoS settings ignored: this kernel lacks their cgroup files", "cgroupVersion", version,
			"missingFiles", missing, "keys", keys)
		return nil
	}
	return &loop{name: "memory-qos", configure: configure, knobs: knob.ReporterFunc(func() []knob.Status {
		cons.mu.Lock()
		cfg, on := cons.memoryQoSLocked()
		cons.mu.Unlock()
		return memoryQoSKnobs(cfg, on, cgroups)
	})}
}

// memoryQoSLocked returns the memory QoS configuration the built-in policies are built with, as builtin
// does, and whether the memoryqos policy runs at all; the caller holds mu.
func (c *consumers) memoryQoSLocked() (memoryqos.Config, bool) {
	cfg := c.base
	if c.configured {
		// A mapped configuration the policies refuse leaves base's in force (builtin logs it).
		if m := policy.FromSLO(c.base, c.resolved); m.Validate() == nil {
			cfg = m
		}
	}
	return cfg.MemoryQoS, slices.Contains(cfg.Enabled, memoryqos.Name)
}

// memoryQoSKnobs is memoryqos.Knobs, with every key off while the policy does not run.
func memoryQoSKnobs(cfg memoryqos.Config, on bool, cgroups cgroup.Prober) []knob.Status {
	out := memoryqos.Knobs(cfg, cgroups)
	if on {
		return out
	}
	for i := range out {
		if out[i].State != knob.Unsupported {
			out[i].State, out[i].Detail = knob.Off, "the memoryqos policy is not in --policies"
		}
	}
	return out
}
