// Package policy lists Tandem's built-in policy hooks in execution order. It is the one place that says
// which policies exist and why they run where they do; adding a policy is its package plus one line here.
package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/batchresource"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/hooks/policy/cpuidle"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
	"github.com/tandemkit/tandem/hooks/policy/memoryqos"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/hooks/policy/resctrl"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
)

// Config holds every built-in policy's configuration.
type Config struct {
	// Enabled names the policies that run; empty runs none.
	Enabled       []string             `json:"enabled"`
	QoS           qos.Config           `json:"qos"`
	BatchResource batchresource.Config `json:"batchResource"`
	CPUIdle       cpuidle.Config       `json:"cpuIdle"`
	CPUBurst      cpuburst.Config      `json:"cpuBurst"`
	MemoryQoS     memoryqos.Config     `json:"memoryQoS"`
	Resctrl       resctrl.Config       `json:"resctrl"`
}

// DefaultConfig enables every built-in policy with its defaults.
func DefaultConfig() Config {
	return Config{
		Enabled:       Names(),
		BatchResource: batchresource.DefaultConfig(),
		CPUIdle:       cpuidle.DefaultConfig(),
		CPUBurst:      cpuburst.DefaultConfig(),
		MemoryQoS:     memoryqos.DefaultConfig(),
		Resctrl:       resctrl.DefaultConfig(),
	}
}

// Deps are what the policies need from the node.
type Deps struct {
	// Cgroups tells the cgroup version and which files the kernel offers (policies only probe it: the front
	// end writes what they return); nil switches off the policies that need it.
	Cgroups cgroup.Writer
	// CPUSet holds the exclusive CPUs and which containers use them, shared by every cpuset hook a
	// configuration change rebuilds; nil (no topology) switches the cpuset policy off.
	CPUSet *alloc.Allocator
	// PoolsChanged is called when exclusive CPUs were taken or returned, so running LS and BE containers
	// move to the new pools.
	PoolsChanged func()
	// BatchResources gives the batch resources of BE pods without Koordinator's annotation from the pod
	// spec; optional.
	BatchResources batchresource.BatchLookup
	// BEQuotaCeiling is the most CFS bandwidth a BE cgroup may have now (suppress.Loop.QuotaCeiling),
	// which batchresource caps BE quotas at so that BE containers start while BE is suppressed on cgroup
	// v1; nil is no ceiling.
	BEQuotaCeiling func() (cgroup.CPUMax, bool)
	// BEStarted is told, without blocking, that a BE container started (actuate/yield sweeps);
	// optional.
	BEStarted func()
	// MemoryRequests gives memory requests from the pod spec; optional.
	MemoryRequests memoryqos.Requests
	// ResctrlRoot is the resctrl mount ("" = /sys/fs/resctrl).
	ResctrlRoot string
}

// Names lists the built-in policies in execution order.
func Names() []string {
	var out []string
	for _, r := range all(Config{}, Deps{}) {
		out = append(out, r.Name)
	}
	return out
}

// Validate rejects unknown policy names and invalid knobs, naming each.
func (c Config) Validate() error {
	var errs []error
	known := Names()
	for _, n := range c.Enabled {
		if !slices.Contains(known, n) {
			errs = append(errs, fmt.Errorf("policies: unknown policy %q; known: %s", n, strings.Join(known, ", ")))
		}
	}
	for name, v := range map[string]interface{ Validate() error }{"cpuBurst": c.CPUBurst, "memoryQoS": c.MemoryQoS, "resctrl": c.Resctrl} {
		if err := v.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Builtin returns the enabled in-process hooks in execution order. Orders leave gaps for hooks.d files.
func Builtin(cfg Config, deps Deps) []hooks.Registration {
	var out []hooks.Registration
	for _, r := range all(cfg, deps) {
		if slices.Contains(cfg.Enabled, r.Name) {
			out = append(out, r)
		}
	}
	return out
}

func all(cfg Config, deps Deps) []hooks.Registration {
	return []hooks.Registration{
		// First: every later policy reads the class it records.
		{Name: qos.Name, Order: 100, New: func() (hooks.Hook, error) { return qos.New(cfg.QoS) }},
		// After qos: the pool follows the class. Before batchresource, which never sets cpusets.
		{Name: cpuset.Name, Order: 200, New: func() (hooks.Hook, error) {
			return cpuset.New(deps.CPUSet, deps.PoolsChanged)
		}},
		// A pod-spec lookup may wait for a lagging informer and then GET once: room beyond the default timeout.
		{Name: batchresource.Name, Order: 300, Timeout: 3 * time.Second, New: func() (hooks.Hook, error) {
			return batchresource.New(cfg.BatchResource, batchresource.Deps{Lookup: deps.BatchResources, QuotaCeiling: deps.BEQuotaCeiling})
		}},
		// Pod-level settings, and a notice when a BE container started: it never competes with the
		// container-level policies for a field.
		{Name: cpuidle.Name, Order: 400, New: func() (hooks.Hook, error) {
			return cpuidle.New(cfg.CPUIdle, deps.Cgroups, deps.BEStarted)
		}},
		// After cpuset and batchresource: the burst follows the quota the container ends up with.
		{Name: cpuburst.Name, Order: 500, New: func() (hooks.Hook, error) {
			return cpuburst.New(cfg.CPUBurst, deps.Cgroups)
		}},
		{Name: memoryqos.Name, Order: 600, Timeout: 3 * time.Second, New: func() (hooks.Hook, error) {
			return memoryqos.New(cfg.MemoryQoS, memoryqos.Deps{Cgroups: deps.Cgroups, Requests: deps.MemoryRequests})
		}},
		// Last: it sets only the RDT class, which no other policy claims.
		{Name: resctrl.Name, Order: 700, New: func() (hooks.Hook, error) {
			return resctrl.New(cfg.Resctrl, resctrl.Deps{Root: deps.ResctrlRoot})
		}},
	}
}
