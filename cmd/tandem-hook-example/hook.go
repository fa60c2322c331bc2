package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// The pod annotations this hook reads.
const (
	annotationCPUShares = "example.tandem.io/cpu-shares"
	annotationCPUSet    = "example.tandem.io/cpuset"
)

// exampleHook answers the two calls it registers for. Embedding the Unimplemented server answers the
// others with codes.Unimplemented; tandem-proxy never sends them, as the registration does not list them.
type exampleHook struct {
	v1alpha1.UnimplementedRuntimeHookServiceServer
}

// PreCreateContainerHook runs before the container exists: the resources it answers are those the
// container is created with.
func (h *exampleHook) PreCreateContainerHook(ctx context.Context, req *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return h.adjust(ctx, "PreCreateContainerHook", req)
}

// PreUpdateContainerResourcesHook runs when kubelet (or Tandem) updates the container's resources. Without
// it, kubelet's next update would put its own CPU shares back.
func (h *exampleHook) PreUpdateContainerResourcesHook(ctx context.Context, req *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	return h.adjust(ctx, "PreUpdateContainerResourcesHook", req)
}

func (h *exampleHook) adjust(ctx context.Context, rpc string, req *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
	logger := klog.FromContext(ctx).WithValues("rpc", rpc,
		"pod", klog.KRef(req.GetPodMeta().GetNamespace(), req.GetPodMeta().GetName()), "container", req.GetContainerMata().GetName())
	res, err := decide(req.GetPodAnnotations())
	if err != nil {
		// InvalidArgument reaches kubelet (under the Fail policy) with this message, so say what to fix.
		logger.Info("Refusing the container: bad annotation", "err", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if res == nil {
		logger.V(2).Info("No example annotations; leaving the container as it is")
		// An empty answer changes nothing.
		return &v1alpha1.ContainerResourceHookResponse{}, nil
	}
	logger.Info("Setting container resources", "cpuShares", res.GetCpuShares(), "cpusetCpus", res.GetCpusetCpus())
	return &v1alpha1.ContainerResourceHookResponse{ContainerResources: res}, nil
}

// decide turns the pod's annotations into the resources to set: nil when it has neither annotation.
// Fields left zero are left as kubelet set them.
func decide(annotations map[string]string) (*v1alpha1.LinuxContainerResources, error) {
	res := &v1alpha1.LinuxContainerResources{}
	if v, ok := annotations[annotationCPUShares]; ok {
		shares, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		// The kernel's range for cpu.shares.
		if err != nil || shares < 2 || shares > 262144 {
			return nil, fmt.Errorf("annotation %s=%q: want an integer from 2 to 262144", annotationCPUShares, v)
		}
		res.CpuShares = shares
	}
	if v, ok := annotations[annotationCPUSet]; ok {
		cpus := strings.TrimSpace(v)
		if err := checkCPUList(cpus); err != nil {
			return nil, fmt.Errorf("annotation %s=%q: %w", annotationCPUSet, v, err)
		}
		res.CpusetCpus = cpus
	}
	if res.CpuShares == 0 && res.CpusetCpus == "" {
		return nil, nil
	}
	return res, nil
}

// checkCPUList accepts the kernel's cpu list format: "0-3,6,8-9".
func checkCPUList(s string) error {
	if s == "" {
		return fmt.Errorf("want a cpu list such as 0-1,4")
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err1 := strconv.ParseUint(lo, 10, 16)
		last, err2 := first, error(nil)
		if isRange {
			last, err2 = strconv.ParseUint(hi, 10, 16)
		}
		if err1 != nil || err2 != nil || last < first {
			return fmt.Errorf("%q is not a cpu or a range of cpus; want a cpu list such as 0-1,4", part)
		}
	}
	return nil
}
