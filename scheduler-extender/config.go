package extender

import (
	"errors"
	"fmt"
)

// MetricPolicy says what filter does with a node whose metric is missing or older than
// nodeMetricExpirationSeconds.
type MetricPolicy string

const (
	// Reject filters the node out.
	Reject MetricPolicy = "Reject"
	// Pass lets the node through; the load and reclaimable checks that need the metric are skipped.
	Pass MetricPolicy = "Pass"
)

// ResourcePercents holds a percentage per resource. The JSON shape is Koordinator's
// usageThresholds map, so values copied from a LoadAwareSchedulingArgs keep working.
type ResourcePercents struct {
	CPU    int64 `json:"cpu"`
	Memory int64 `json:"memory"`
}

// ResourceWeights weighs each resource in the prioritize score.
type ResourceWeights struct {
	CPU    int64 `json:"cpu"`
	Memory int64 `json:"memory"`
}

// EstimatedUsage is what a pod is assumed to use before it shows up in a node metric, per resource
// for which it requests nothing.
type EstimatedUsage struct {
	CPUMilli    int64 `json:"cpuMilli"`
	MemoryBytes int64 `json:"memoryBytes"`
}

// ExpiredMetricPolicy chooses a MetricPolicy by the kind of pod being scheduled.
type ExpiredMetricPolicy struct {
	// BatchPods applies to pods requesting kubernetes.io/batch-cpu or kubernetes.io/batch-memory:
	// their capacity is only known from a fresh metric.
	BatchPods MetricPolicy `json:"batchPods"`
	// OtherPods applies to every other pod; kube-scheduler's own checks still hold for them.
	OtherPods MetricPolicy `json:"otherPods"`
}

// Config is the scheduling policy of the extender. Field names follow Koordinator's load-aware
// scheduling arguments where one exists.
type Config struct {
	// UsageThresholds rejects a node whose usage, in percent of allocatable, is above the value.
	// 0 disables the check for that resource. A node can override it with the
	// tandem.io/usage-thresholds annotation. Default cpu 65, memory 95.
	UsageThresholds ResourcePercents `json:"usageThresholds"`
	// NodeMetricExpirationSeconds is the age after which a node metric is stale. Keep it above the
	// reporter's reportIntervalSeconds and its updateTimeThresholdSeconds (300 by default): a node whose load
	// holds steady is only re-reported that often. Default 600.
	NodeMetricExpirationSeconds int64 `json:"nodeMetricExpirationSeconds"`
	// ExpiredMetricPolicy decides about nodes with a stale or missing metric. Default: Reject batch
	// pods, Pass others.
	ExpiredMetricPolicy ExpiredMetricPolicy `json:"expiredMetricPolicy"`
	// ResourceWeights weighs CPU against memory in the score. Default 1 and 1.
	ResourceWeights ResourceWeights `json:"resourceWeights"`
	// DefaultEstimatedUsage is assumed for a pod that requests nothing of a resource, until the
	// node metric counts it. Default 250m CPU and 200 MiB, as Koordinator's estimator.
	DefaultEstimatedUsage EstimatedUsage `json:"defaultEstimatedUsage"`
	// MaxRequestBodyBytes bounds a filter or prioritize request; larger ones get HTTP 413 before
	// their body is read. With nodeCacheCapable a request carries only node names (about 100 KiB
	// for 5000 nodes); without it every Node object is sent. Default 96 MiB: see
	// DefaultMaxRequestBodyBytes.
	MaxRequestBodyBytes int64 `json:"maxRequestBodyBytes"`
	// MaxRequestsInflight bounds the filter and prioritize requests served at once, of which one
	// at most larger than 1 MiB; past it a request gets HTTP 429 with Retry-After at once, as
	// past kube-apiserver's --max-requests-inflight. Default 4: see DefaultMaxRequestsInflight.
	MaxRequestsInflight int `json:"maxRequestsInflight"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		UsageThresholds:             ResourcePercents{CPU: 65, Memory: 95},
		NodeMetricExpirationSeconds: 600,
		ExpiredMetricPolicy:         ExpiredMetricPolicy{BatchPods: Reject, OtherPods: Pass},
		ResourceWeights:             ResourceWeights{CPU: 1, Memory: 1},
		DefaultEstimatedUsage:       EstimatedUsage{CPUMilli: 250, MemoryBytes: 200 << 20},
		MaxRequestBodyBytes:         DefaultMaxRequestBodyBytes,
		MaxRequestsInflight:         DefaultMaxRequestsInflight,
	}
}

// Validate reports every invalid field by its JSON path, joined.
func (c *Config) Validate() error {
	var errs []error
	percent := func(path string, v int64) {
		if v < 0 || v > 100 {
			errs = append(errs, fmt.Errorf("%s: must be within 0..100 (0 disables), got %d", path, v))
		}
	}
	percent("usageThresholds.cpu", c.UsageThresholds.CPU)
	percent("usageThresholds.memory", c.UsageThresholds.Memory)
	if c.NodeMetricExpirationSeconds <= 0 {
		errs = append(errs, fmt.Errorf("nodeMetricExpirationSeconds: must be positive, got %d", c.NodeMetricExpirationSeconds))
	}
	policy := func(path string, p MetricPolicy) {
		if p != Reject && p != Pass {
			errs = append(errs, fmt.Errorf("%s: must be %q or %q, got %q", path, Reject, Pass, p))
		}
	}
	policy("expiredMetricPolicy.batchPods", c.ExpiredMetricPolicy.BatchPods)
	policy("expiredMetricPolicy.otherPods", c.ExpiredMetricPolicy.OtherPods)
	if c.ResourceWeights.CPU < 0 || c.ResourceWeights.Memory < 0 {
		errs = append(errs, fmt.Errorf("resourceWeights: must not be negative, got cpu %d memory %d", c.ResourceWeights.CPU, c.ResourceWeights.Memory))
	} else if c.ResourceWeights.CPU+c.ResourceWeights.Memory == 0 {
		errs = append(errs, errors.New("resourceWeights: at least one weight must be positive"))
	}
	if c.DefaultEstimatedUsage.CPUMilli < 0 || c.DefaultEstimatedUsage.MemoryBytes < 0 {
		errs = append(errs, errors.New("defaultEstimatedUsage: must not be negative"))
	}
	if c.MaxRequestBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("maxRequestBodyBytes: must be positive, got %d", c.MaxRequestBodyBytes))
	}
	if c.MaxRequestsInflight <= 0 {
		errs = append(errs, fmt.Errorf("maxRequestsInflight: must be positive, got %d", c.MaxRequestsInflight))
	}
	return errors.Join(errs...)
}

// Defaults of the request limits. Together with the decoding limits (wire.go) and the rule that
// requests over 1 MiB are served one at a time (inflight), they bound what requests can make the
// extender hold. Measured with TestMemoryUnderHostileLoad (cmd/tandem-extender): the binary under
// 32 clients sending 5000 full Node objects, 50000 node names, 96 MiB of `{}` Node objects or
// containers, a 96 MiB Pod and bodies past the limit peaked at 229 to 285 MiB RSS (VmHWM),
// against 3 GiB and rising, when the test's watchdog stopped it, before the limits.
const (
	// DefaultMaxRequestBodyBytes lets a 5000-node request without nodeCacheCapable through:
	// 77.5 MiB measured with kubelet's 50 images per node and the managedFields kube-scheduler's
	// node informer keeps (TestFullNodesOf5000PassTheDefaultLimit), plus a fifth.
	DefaultMaxRequestBodyBytes = 96 << 20
	// DefaultMaxRequestsInflight: kube-scheduler calls its extenders from its one scheduling
	// loop, a pod at a time; the rest is room for calls still running after kube-scheduler's
	// httpTimeout gave up on them, and for a second scheduler taking over the lease.
	DefaultMaxRequestsInflight = 4
)
