// Package nodemetric is the contract between Tandem's node reporter, which writes it, and
// tandem-extender, which reads it: the names of the batch (reclaimable) extended resources and the
// schema of the node-metric annotation.
//
// The reporter publishes reclaimable capacity twice on every Node: as the extended resources
// kubernetes.io/batch-cpu (milli-cores) and kubernetes.io/batch-memory (bytes) in
// status.allocatable, so kube-scheduler's own fit check counts batch requests, and inside the
// annotation tandem.io/node-metric together with the load it measured, so the extender can filter
// and score by real usage from one Node watch.
//
// The annotation value is one JSON object; every key is lowerCamelCase:
//
//	{
//	  "updateTime": "2026-11-21T06:00:00Z",     // RFC 3339; when the sample window ended
//	  "reportIntervalSeconds": 60,               // usage is averaged over this window
//	  "nodeUsage":   {"cpuMilli": 2300, "memoryBytes": 8589934592}, // whole node
//	  "hpUsage":     {"cpuMilli": 1800, "memoryBytes": 6442450944}, // high-priority (non-BE) pods
//	  "reclaimable": {"cpuMilli": 3000, "memoryBytes": 4294967296}  // batch capacity
//	}
//
// Usage figures are averages over the reportIntervalSeconds that end at updateTime, so a pod that
// was not running for that whole window is not (fully) counted in them; the extender adds an
// estimate for such pods. reclaimable is the node's total batch capacity (what it also writes to
// status.allocatable), before subtracting batch requests of pods already placed there.
//
// Compatibility: fields are only ever added, and readers ignore keys they do not know, so a newer
// reporter and an older extender (or the reverse) keep working during a rolling upgrade.
package nodemetric

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
)

const (
	// AnnotationKey is the Node annotation that holds a NodeMetric as JSON.
	AnnotationKey = "tandem.io/node-metric"

	// ResourceBatchCPU is reclaimable CPU in milli-cores: a pod asking for one core requests 1000.
	// The name is Koordinator's, so batch workloads written for Koordinator run unchanged.
	ResourceBatchCPU corev1.ResourceName = "kubernetes.io/batch-cpu"
	// ResourceBatchMemory is reclaimable memory in bytes.
	ResourceBatchMemory corev1.ResourceName = "kubernetes.io/batch-memory"
)

// Resources is an amount of CPU and memory.
type Resources struct {
	// CPUMilli is CPU in milli-cores.
	CPUMilli int64 `json:"cpuMilli"`
	// MemoryBytes is memory in bytes.
	MemoryBytes int64 `json:"memoryBytes"`
}

// NodeMetric is the value of the tandem.io/node-metric annotation.
type NodeMetric struct {
	// UpdateTime is when the sample window ended. A reader compares it with its own clock to
	// decide whether the metric is stale.
	UpdateTime time.Time `json:"updateTime"`
	// ReportIntervalSeconds is both the reporting cadence and the window the usage figures
	// average over.
	ReportIntervalSeconds int64 `json:"reportIntervalSeconds"`
	// NodeUsage is what the whole node used: all pods, system daemons and the kernel.
	NodeUsage Resources `json:"nodeUsage"`
	// HPUsage is what high-priority (every class except BE) pods used.
	HPUsage Resources `json:"hpUsage"`
	// Reclaimable is the node's batch capacity, equal to the kubernetes.io/batch-* allocatable
	// that the reporter wrote at the same time.
	Reclaimable Resources `json:"reclaimable"`
}

// Validate reports every field that a reader could not trust, joined.
func (m *NodeMetric) Validate() error {
	var errs []error
	if m.UpdateTime.IsZero() {
		errs = append(errs, errors.New("updateTime: must be set"))
	}
	if m.ReportIntervalSeconds <= 0 {
		errs = append(errs, fmt.Errorf("reportIntervalSeconds: must be positive, got %d", m.ReportIntervalSeconds))
	}
	for _, r := range []struct {
		path string
		v    Resources
	}{{"nodeUsage", m.NodeUsage}, {"hpUsage", m.HPUsage}, {"reclaimable", m.Reclaimable}} {
		if r.v.CPUMilli < 0 {
			errs = append(errs, fmt.Errorf("%s.cpuMilli: must not be negative, got %d", r.path, r.v.CPUMilli))
		}
		if r.v.MemoryBytes < 0 {
			errs = append(errs, fmt.Errorf("%s.memoryBytes: must not be negative, got %d", r.path, r.v.MemoryBytes))
		}
	}
	return errors.Join(errs...)
}

// Parse decodes and validates an annotation value. Errors are of class errdefs.ErrInvalidArgument.
func Parse(value string) (*NodeMetric, error) {
	var m NodeMetric
	if err := json.Unmarshal([]byte(value), &m); err != nil {
		return nil, fmt.Errorf("annotation %s is not a node metric: %w: %w", AnnotationKey, err, errdefs.ErrInvalidArgument)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("annotation %s: %w: %w", AnnotationKey, err, errdefs.ErrInvalidArgument)
	}
	return &m, nil
}

// Marshal validates m and encodes it as an annotation value, so a reporter cannot publish a
// metric that readers would reject.
func Marshal(m *NodeMetric) (string, error) {
	if err := m.Validate(); err != nil {
		return "", fmt.Errorf("node metric: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode node metric: %w", err)
	}
	return string(b), nil
}

// FromNode reads the metric of a node. It returns an error of class errdefs.ErrNotFound when the
// node has no annotation, and of class errdefs.ErrInvalidArgument when the annotation is broken.
func FromNode(node *corev1.Node) (*NodeMetric, error) {
	value, ok := node.Annotations[AnnotationKey]
	if !ok {
		return nil, fmt.Errorf("node %s has no %s annotation: %w", node.Name, AnnotationKey, errdefs.ErrNotFound)
	}
	return Parse(value)
}
