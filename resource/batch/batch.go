// Package batch translates the batch resources of BE pods (kubernetes.io/batch-cpu in milli-cores and
// kubernetes.io/batch-memory in bytes) into cgroup settings. Kubelet does not know these extended
// resources, so the CRI request carries none of them: they come from Koordinator's
// node.koordinator.sh/extended-resource-spec annotation (or from the pod spec, read by the caller).
package batch

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/containerd/errdefs"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// Resource names and the annotation that carries them.
const (
	CPU                            = "kubernetes.io/batch-cpu"
	Memory                         = "kubernetes.io/batch-memory"
	AnnotationExtendedResourceSpec = "node.koordinator.sh/extended-resource-spec"
)

// Limits of cpu.shares, as the kernel enforces them, and the CFS period used when the container has
// none (µs).
const (
	MinShares     = cgroup.MinShares
	MaxShares     = cgroup.MaxShares
	DefaultPeriod = cgroup.DefaultPeriod
)

// Container is one container's batch resources. Zero limits mean unlimited.
type Container struct {
	CPURequestMilli int64 `json:"cpuRequestMilli"`
	CPULimitMilli   int64 `json:"cpuLimitMilli"`
	MemoryRequest   int64 `json:"memoryRequest"`
	MemoryLimit     int64 `json:"memoryLimit"`
}

// spec is the annotation's shape: {"containers": {"<name>": {"requests": {...}, "limits": {...}}}}, the
// requests and limits being Kubernetes resource lists.
type spec struct {
	Containers map[string]struct {
		Requests map[string]string `json:"requests"`
		Limits   map[string]string `json:"limits"`
	} `json:"containers"`
}

// ParseSpec reads the extended-resource-spec annotation. Malformed JSON or quantities are
// InvalidArgument, naming what is wrong: a BE pod with a typo must not silently run unlimited.
func ParseSpec(annotation string) (map[string]Container, error) {
	var s spec
	if err := json.Unmarshal([]byte(annotation), &s); err != nil {
		return nil, fmt.Errorf("annotation %s: %w: %w", AnnotationExtendedResourceSpec, err, errdefs.ErrInvalidArgument)
	}
	out := make(map[string]Container, len(s.Containers))
	for _, name := range slices.Sorted(maps.Keys(s.Containers)) {
		c := s.Containers[name]
		var got Container
		var err error
		if got.CPURequestMilli, err = quantity(c.Requests[CPU]); err == nil {
			if got.CPULimitMilli, err = quantity(c.Limits[CPU]); err == nil {
				if got.MemoryRequest, err = quantity(c.Requests[Memory]); err == nil {
					got.MemoryLimit, err = quantity(c.Limits[Memory])
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("annotation %s, container %s: %w: %w", AnnotationExtendedResourceSpec, name, err, errdefs.ErrInvalidArgument)
		}
		out[name] = got
	}
	return out, nil
}

// quantity parses a resource quantity as an integer ("2000" batch-cpu is 2000 milli-cores; "1Gi"
// batch-memory is bytes). Empty is 0.
func quantity(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w", s, err)
	}
	v, ok := q.AsInt64()
	if !ok || v < 0 {
		return 0, fmt.Errorf("quantity %q: want a non-negative integer", s)
	}
	return v, nil
}

// CPUShares is request × 1024 / 1000 within what the kernel accepts, as kubelet converts requests: a
// batch-cpu far beyond the machine is the most shares, never a wrapped few.
func CPUShares(requestMilli int64) int64 {
	return cgroup.MilliCPUToShares(requestMilli)
}

// CFSQuota is limit × period / 1000 µs within what the kernel accepts, as kubelet converts limits: at
// least 1 ms (runc could not create a container limited to a few milli-cores otherwise), at most the
// kernel's largest quota. No limit is -1 (unlimited). A period of 0 or less is DefaultPeriod.
func CFSQuota(limitMilli, period int64) int64 {
	return cgroup.MilliCPUToQuota(limitMilli, period)
}

// Sum adds containers up for the pod-level cgroup. Any container without a limit makes the pod unlimited.
func Sum(cs map[string]Container) Container {
	var s Container
	cpuUnlimited, memUnlimited := false, false
	for _, c := range cs {
		// Saturating: a sum that wrapped negative would read as no limit at all.
		s.CPURequestMilli = cgroup.Add(s.CPURequestMilli, c.CPURequestMilli)
		s.MemoryRequest = cgroup.Add(s.MemoryRequest, c.MemoryRequest)
		s.CPULimitMilli = cgroup.Add(s.CPULimitMilli, c.CPULimitMilli)
		s.MemoryLimit = cgroup.Add(s.MemoryLimit, c.MemoryLimit)
		cpuUnlimited = cpuUnlimited || c.CPULimitMilli == 0
		memUnlimited = memUnlimited || c.MemoryLimit == 0
	}
	if cpuUnlimited {
		s.CPULimitMilli = 0
	}
	if memUnlimited {
		s.MemoryLimit = 0
	}
	return s
}
