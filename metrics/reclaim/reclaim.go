// Package reclaim computes a node's reclaimable (batch) capacity from measured usage and the
// colocation-config knobs. It is pure: samples and settings in, quantities out; it reads no files,
// keeps no clock and talks to no server, so the node reporter and tests drive it alike.
//
// The formula is Koordinator's, for CPU and memory separately:
//
//	batch = capacity − capacity × (100 − reclaimThresholdPercent)% − max(systemUsed, reserved) − Σ HP
//
// HP are the high-priority pods (every QoS class except BE). What one HP pod counts for depends on
// the calculate policy: its usage (usage), its request (request), or the larger of both
// (maxUsageRequest). The result is floored at 0 and capped at batch{CPU,Memory}ThresholdPercent of
// capacity, and batch CPU at the steal headroom's ceiling where the host of a virtual machine takes
// CPU back (metrics/headroom): idle CPU the host does not give is no capacity.
//
// Usage figures should be predicted peaks (see Predictor), not the last sample: batch pods
// placed against a quiet second would be evicted at the next busy one.
package reclaim

import (
	"fmt"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// Resources is an amount of CPU (milli-cores) and memory (bytes); it is the node-metric
// annotation's type, so results publish without conversion.
type Resources = nodemetric.Resources

// Pod is one high-priority pod's contribution. Callers leave BE pods out.
type Pod struct {
	// UID identifies the pod in logs and tests.
	UID string
	// Usage is the pod's predicted peak usage.
	Usage Resources
	// Request is what the pod asked for. Where the pod spec is not at hand it comes from the
	// container resources applied through the runtime (see RequestFromLinux).
	Request Resources
}

// Input is what the formula needs about one node.
type Input struct {
	// Capacity is the node's total: CPUs × 1000 and MemTotal.
	Capacity Resources
	// SystemUsage is the predicted peak of what is not pods: system daemons, kubelet, the kernel.
	SystemUsage Resources
	// Reserved is what the node keeps for the system whatever it uses (kube-reserved +
	// system-reserved, that is capacity − allocatable of the Node object).
	Reserved Resources
	// HP are the high-priority pods.
	HP []Pod
	// BECeilingMilli, when above 0, caps batch CPU: the most BE may use because of what the host of a
	// virtual machine takes back (metrics/headroom), which no formula on idle CPU sees.
	BECeilingMilli int64
}

// Result is the batch capacity and the terms it was computed from, so that a log line or the
// node-metric annotation can explain a number.
type Result struct {
	// Batch is the reclaimable capacity: kubernetes.io/batch-cpu and kubernetes.io/batch-memory.
	Batch Resources
	// HP is Σ HP as the policies counted it.
	HP Resources
	// HPUsage is Σ of the HP pods' usage, whatever the policy.
	HPUsage Resources
	// System is max(systemUsed, reserved).
	System Resources
	// Safety is capacity × (100 − reclaimThresholdPercent)%: what the formula never hands out.
	Safety Resources
	// CappedByHeadroom says the batch CPU is the steal headroom's ceiling, lower than the formula's.
	CappedByHeadroom bool
	// Capacity is the input's, kept so that the result explains itself.
	Capacity Resources
	// Cap is batch{CPU,Memory}ThresholdPercent of capacity, 0 where there is no cap.
	Cap Resources
	// Ceiling is the steal headroom's ceiling on batch CPU, 0 where there is none.
	Ceiling int64
}

// Settings are the colocation-config knobs the formula reads.
type Settings struct {
	CPUReclaimThresholdPercent    int64
	MemoryReclaimThresholdPercent int64
	CPUCalculatePolicy            slo.CalculatePolicy
	MemoryCalculatePolicy         slo.CalculatePolicy
	// BatchCPUThresholdPercent caps batch CPU at this share of capacity; 0 means no cap.
	BatchCPUThresholdPercent int64
	// BatchMemoryThresholdPercent caps batch memory at this share of capacity; 0 means no cap.
	BatchMemoryThresholdPercent int64
}

// SettingsFrom picks the formula's knobs out of a resolved colocation-config.
func SettingsFrom(c slo.ColocationSettings) Settings {
	return Settings{
		CPUReclaimThresholdPercent:    c.CPUReclaimThresholdPercent,
		MemoryReclaimThresholdPercent: c.MemoryReclaimThresholdPercent,
		CPUCalculatePolicy:            c.CPUCalculatePolicy,
		MemoryCalculatePolicy:         c.MemoryCalculatePolicy,
		BatchCPUThresholdPercent:      c.BatchCPUThresholdPercent,
		BatchMemoryThresholdPercent:   c.BatchMemoryThresholdPercent,
	}
}

// Validate reports knobs the formula cannot use. config/slo validates the same ranges when it
// parses; this guards callers that build Settings by hand.
func (s Settings) Validate() error {
	for _, p := range []struct {
		name string
		v    int64
	}{
		{"cpuReclaimThresholdPercent", s.CPUReclaimThresholdPercent},
		{"memoryReclaimThresholdPercent", s.MemoryReclaimThresholdPercent},
		{"batchCPUThresholdPercent", s.BatchCPUThresholdPercent},
		{"batchMemoryThresholdPercent", s.BatchMemoryThresholdPercent},
	} {
		if p.v < 0 || p.v > 100 {
			return fmt.Errorf("%s: must be within 0..100, got %d", p.name, p.v)
		}
	}
	for _, p := range []struct {
		name string
		v    slo.CalculatePolicy
	}{{"cpuCalculatePolicy", s.CPUCalculatePolicy}, {"memoryCalculatePolicy", s.MemoryCalculatePolicy}} {
		switch p.v {
		case "", slo.CalculateByPodUsage, slo.CalculateByPodRequest, slo.CalculateByPodMaxUsageRequest:
		default:
			return fmt.Errorf("%s: must be %q, %q or %q, got %q", p.name,
				slo.CalculateByPodUsage, slo.CalculateByPodRequest, slo.CalculateByPodMaxUsageRequest, p.v)
		}
	}
	return nil
}

// Compute applies the formula. An empty policy counts usage, as Koordinator's default does.
func Compute(s Settings, in Input) Result {
	r := Result{Capacity: in.Capacity, Ceiling: max(in.BECeilingMilli, 0)}
	if s.BatchCPUThresholdPercent > 0 {
		r.Cap.CPUMilli = percentOf(in.Capacity.CPUMilli, s.BatchCPUThresholdPercent)
	}
	if s.BatchMemoryThresholdPercent > 0 {
		r.Cap.MemoryBytes = percentOf(in.Capacity.MemoryBytes, s.BatchMemoryThresholdPercent)
	}
	for _, p := range in.HP {
		r.HPUsage.CPUMilli += p.Usage.CPUMilli
		r.HPUsage.MemoryBytes += p.Usage.MemoryBytes
		r.HP.CPUMilli += hpAmount(s.CPUCalculatePolicy, p.Usage.CPUMilli, p.Request.CPUMilli)
		r.HP.MemoryBytes += hpAmount(s.MemoryCalculatePolicy, p.Usage.MemoryBytes, p.Request.MemoryBytes)
	}
	r.System = Resources{
		CPUMilli:    max(in.SystemUsage.CPUMilli, in.Reserved.CPUMilli),
		MemoryBytes: max(in.SystemUsage.MemoryBytes, in.Reserved.MemoryBytes),
	}
	r.Safety = Resources{
		CPUMilli:    percentOf(in.Capacity.CPUMilli, 100-s.CPUReclaimThresholdPercent),
		MemoryBytes: percentOf(in.Capacity.MemoryBytes, 100-s.MemoryReclaimThresholdPercent),
	}
	r.Batch = Resources{
		CPUMilli: batch(in.Capacity.CPUMilli, r.Safety.CPUMilli, r.System.CPUMilli, r.HP.CPUMilli,
			s.BatchCPUThresholdPercent),
		MemoryBytes: batch(in.Capacity.MemoryBytes, r.Safety.MemoryBytes, r.System.MemoryBytes, r.HP.MemoryBytes,
			s.BatchMemoryThresholdPercent),
	}
	if in.BECeilingMilli > 0 && in.BECeilingMilli < r.Batch.CPUMilli {
		r.Batch.CPUMilli, r.CappedByHeadroom = in.BECeilingMilli, true
	}
	return r
}

func hpAmount(policy slo.CalculatePolicy, usage, request int64) int64 {
	switch policy {
	case slo.CalculateByPodRequest:
		return request
	case slo.CalculateByPodMaxUsageRequest:
		return max(usage, request)
	default:
		return usage
	}
}

func batch(capacity, safety, system, hp, capPercent int64) int64 {
	b := max(capacity-safety-system-hp, 0)
	if capPercent > 0 {
		b = min(b, percentOf(capacity, capPercent))
	}
	return b
}

// percentOf is v × p / 100 without overflowing for memory sizes in bytes (p ≤ 100).
func percentOf(v, p int64) int64 {
	return v/100*p + v%100*p/100
}

// sharesPerCPU is the CPU shares of one core, as kubelet converts requests to cgroup values.
const sharesPerCPU = 1024

// RequestFromLinux estimates a container's request from the resources applied to it, for pods
// whose spec is not at hand. kubelet turns the CPU request into cpu.shares (request × 1024 / 1000),
// so shares give it back; a container with only the minimum shares requested nothing, unless a
// CFS quota says more. The memory request never reaches the runtime, so the memory limit stands
// in for it: that over-counts pods whose limit exceeds their request, which errs towards less
// batch capacity, the safe side. Values beyond what kubelet sends saturate: a wrapped, negative
// request would hand the pod's CPU to batch work.
func RequestFromLinux(cpuShares, cpuQuota, cpuPeriod, memoryLimitBytes int64) Resources {
	var r Resources
	if cpuShares > cgroup.MinShares {
		r.CPUMilli = cgroup.Scale(cpuShares, 1000, sharesPerCPU)
	} else if cpuQuota > 0 && cpuPeriod > 0 {
		r.CPUMilli = cgroup.Scale(cpuQuota, 1000, cpuPeriod)
	}
	if memoryLimitBytes > 0 {
		r.MemoryBytes = memoryLimitBytes
	}
	return r
}
