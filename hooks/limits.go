package hooks

import (
	"errors"
	"fmt"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
)

// Limits bound what hooks may add to a call. Every byte a hook adds to a pod or container is kept by the
// runtime, sent back in every ListPodSandbox or ListContainers answer (which kubelet and containerd cap
// at 16 MiB for the whole node) and passed to every later hook, so a runaway answer is refused as that
// hook failing rather than merged.
type Limits struct {
	// MaxAnswerBytes bounds the bytes one hook's answer adds or changes: the keys and values of its labels,
	// annotations, environment, cgroup files and hugepage limits, and its strings. Values an answer
	// echoes back unchanged do not count.
	MaxAnswerBytes int `json:"maxHookAnswerBytes"`
	// MaxMetadataBytes bounds the labels and annotations (keys and values) of the pod in PreRunPodSandbox,
	// or of the container in the container stages, once an answer is merged. An answer that takes them
	// past it is refused; one that leaves them as large as kubelet sent them is not.
	MaxMetadataBytes int `json:"maxMetadataBytes"`
}

// DefaultLimits anchors both limits on the API server's own bound: the annotations of a pod may not
// exceed 256 KiB (apimachinery's TotalAnnotationSizeLimitB), so no hook needs to add more than a whole
// pod may carry. The metadata limit has 64 KiB more for the labels (kubelet adds three of its own, and a
// label value is at most 63 bytes) and for what Tandem's and hook servers' annotations add, so that a pod
// the API server accepted is never refused.
func DefaultLimits() Limits {
	return Limits{
		MaxAnswerBytes:   apivalidation.TotalAnnotationSizeLimitB,
		MaxMetadataBytes: DefaultMaxMetadataBytes,
	}
}

// DefaultMaxMetadataBytes is the default bound on a pod's or a container's labels and annotations, for
// the proxy's own check of kubelet's requests as for hooks.
const DefaultMaxMetadataBytes = apivalidation.TotalAnnotationSizeLimitB + 64<<10

// Validate reports every invalid field.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxAnswerBytes <= 0 {
		errs = append(errs, fmt.Errorf("maxHookAnswerBytes: %d must be positive", l.MaxAnswerBytes))
	}
	if l.MaxMetadataBytes <= 0 {
		errs = append(errs, fmt.Errorf("maxMetadataBytes: %d must be positive", l.MaxMetadataBytes))
	}
	return errors.Join(errs...)
}

// MetadataBytes is the size of labels and annotations as the API server counts annotations: the length
// of every key and value.
func MetadataBytes(maps ...map[string]string) int {
	n := 0
	for _, m := range maps {
		for k, v := range m {
			n += len(k) + len(v)
		}
	}
	return n
}
