package admission

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tandemkit/tandem/resource/batch"
)

// The resources a batch pod's cpu and memory become.
const (
	resourceCPU    = "cpu"
	resourceMemory = "memory"
)

// maxCPU is the most CPU whose milli-cores fit in an int64.
var maxCPU = resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)

// convertPod turns every container's cpu and memory, requests and limits, and the pod's overhead,
// into batch-cpu (milli-cores, as a whole number: "1" CPU is "1000") and batch-memory, as
// Koordinator's webhook does, so the pod is placed on the capacity nodes reclaim rather than on
// what online pods reserved. A request without a limit gets the limit equal to it, and a limit
// without a request the request equal to it, as Koordinator does: batch resources are not
// overcommitted a second time.
func convertPod(pod podDoc) error {
	for _, c := range pod.containers() {
		name, _ := c["name"].(string)
		res, _ := c["resources"].(map[string]any)
		if res == nil {
			continue
		}
		for _, kind := range []string{"requests", "limits"} {
			list, _ := res[kind].(map[string]any)
			if err := convertList(list); err != nil {
				return fmt.Errorf("container %s: resources.%s: %w", name, kind, err)
			}
		}
		requests, _ := res["requests"].(map[string]any)
		limits, _ := res["limits"].(map[string]any)
		for _, r := range []string{batch.CPU, batch.Memory} {
			req, hasReq := requests[r]
			lim, hasLim := limits[r]
			switch {
			case hasReq && !hasLim:
				if limits == nil {
					limits = map[string]any{}
					res["limits"] = limits
				}
				limits[r] = req
			case hasLim && !hasReq:
				if requests == nil {
					requests = map[string]any{}
					res["requests"] = requests
				}
				requests[r] = lim
			}
		}
	}
	if overhead, ok := pod.get("spec", "overhead").(map[string]any); ok {
		if err := convertList(overhead); err != nil {
			return fmt.Errorf("spec.overhead: %w", err)
		}
	}
	return nil
}

// convertList replaces cpu by batch-cpu and memory by batch-memory in one resource list.
func convertList(list map[string]any) error {
	if v, ok := list[resourceCPU]; ok {
		q, err := quantity(v)
		if err != nil {
			return fmt.Errorf("cpu: %w", err)
		}
		if q.Sign() < 0 || q.Cmp(*maxCPU) >= 0 {
			return fmt.Errorf("cpu %s cannot be written as batch-cpu milli-cores", q.String())
		}
		list[batch.CPU] = strconv.FormatInt(q.MilliValue(), 10)
		delete(list, resourceCPU)
	}
	if v, ok := list[resourceMemory]; ok {
		q, err := quantity(v)
		if err != nil {
			return fmt.Errorf("memory: %w", err)
		}
		// ParseQuantity saturates at the largest int64 rather than fail, so reaching it is overflow.
		if q.Sign() < 0 || q.CmpInt64(math.MaxInt64) >= 0 {
			return fmt.Errorf("memory %s cannot be written as batch-memory bytes", q.String())
		}
		if s, ok := v.(string); ok && q.Cmp(*resource.NewQuantity(q.Value(), resource.BinarySI)) == 0 {
			// Whole bytes keep the form the user wrote ("3456Mi"), as Koordinator's webhook does: users
			// compare the mutated pod with what it shows.
			list[batch.Memory] = s
		} else {
			// A fraction of a byte rounds up: batch-memory counts whole bytes.
			list[batch.Memory] = strconv.FormatInt(q.Value(), 10)
		}
		delete(list, resourceMemory)
	}
	return nil
}

// quantity reads a resource quantity as the API server sends it: a string, or a bare number.
func quantity(v any) (resource.Quantity, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	default:
		return resource.Quantity{}, fmt.Errorf("%v is not a quantity", v)
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%q: %w", s, err)
	}
	return q, nil
}

// annotateBatch writes node.koordinator.sh/extended-resource-spec from the batch resources of the
// pod's containers (init containers too: they run in cgroups of their own), so that a node sizes
// their cgroups without asking the API server. A pod without batch resources is left as it is.
func annotateBatch(pod podDoc) error {
	type resources struct {
		Requests map[string]string `json:"requests,omitempty"`
		Limits   map[string]string `json:"limits,omitempty"`
	}
	spec := map[string]resources{}
	for _, c := range pod.containers() {
		name, _ := c["name"].(string)
		res, _ := c["resources"].(map[string]any)
		var r resources
		for kind, dst := range map[string]*map[string]string{"requests": &r.Requests, "limits": &r.Limits} {
			list, _ := res[kind].(map[string]any)
			for _, n := range []string{batch.CPU, batch.Memory} {
				v, ok := list[n]
				if !ok {
					continue
				}
				q, err := quantity(v)
				if err != nil {
					return fmt.Errorf("container %s: resources.%s.%s: %w", name, kind, n, err)
				}
				if *dst == nil {
					*dst = map[string]string{}
				}
				(*dst)[n] = q.String()
			}
		}
		if r.Requests != nil || r.Limits != nil {
			spec[name] = r
		}
	}
	if len(spec) == 0 {
		return nil
	}
	b, err := json.Marshal(map[string]any{"containers": spec})
	if err != nil {
		return err
	}
	pod.set(string(b), "metadata", "annotations", batch.AnnotationExtendedResourceSpec)
	return nil
}
