// Package qos resolves a pod's QoS class from the dialects operators use: Koordinator's label, openFuyao's
// annotation, or, when neither is present, the Kubernetes QoS class that kubelet encoded in the pod's
// cgroup parent (CRI carries no pod spec, but the cgroup layout says Guaranteed, Burstable or BestEffort).
package qos

import (
	"fmt"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// Class is a Koordinator QoS class.
type Class string

// The classes, from most to least protected.
const (
	System Class = "SYSTEM"
	LSE    Class = "LSE" // latency sensitive, exclusive CPUs
	LSR    Class = "LSR" // latency sensitive, reserved CPUs (shared with BE only)
	LS     Class = "LS"  // latency sensitive, shared pool
	BE     Class = "BE"  // best effort, batch
)

// Keys of the dialects.
const (
	LabelKoordinator      = "koordinator.sh/qosClass"
	AnnotationOpenFuyao   = "openfuyao.com/QoS-level"
	openFuyaoHighLatency  = "HLS"
	kubeQoSBestEffort     = "besteffort"
	kubeQoSBurstable      = "burstable"
	kubeQoSGuaranteedPod  = "pod"
	kubeQoSSystemdPodPref = "kubepods-pod"
)

// Source says which dialect decided.
type Source string

// The sources, in precedence order.
const (
	FromLabel      Source = "label " + LabelKoordinator
	FromAnnotation Source = "annotation " + AnnotationOpenFuyao
	FromKubernetes Source = "kubernetes QoS"
)

// Input is what the resolution looks at.
type Input struct {
	Labels       map[string]string
	Annotations  map[string]string
	CgroupParent string
	// StaticCPUManager is true when kubelet's CPU manager policy is static: its Guaranteed pods already
	// hold exclusive CPUs, which is what LSR means.
	StaticCPUManager bool
}

// Result is a resolved class, where it came from, and a note when dialects disagreed.
type Result struct {
	Class  Class
	Source Source
	// Conflict is set when the label and the annotation disagree; the label wins. Log it.
	Conflict string
}

// Resolve returns the pod's class. An unknown value in a dialect is InvalidArgument: guessing would put a
// pod in the wrong CPU pool.
func Resolve(in Input) (Result, error) {
	label, hasLabel := in.Labels[LabelKoordinator]
	ann, hasAnn := in.Annotations[AnnotationOpenFuyao]
	var fromAnn Class
	if hasAnn {
		var err error
		if fromAnn, err = parseOpenFuyao(ann); err != nil {
			return Result{}, err
		}
	}
	if hasLabel {
		c, err := Parse(label)
		if err != nil {
			return Result{}, fmt.Errorf("label %s: %w", LabelKoordinator, err)
		}
		r := Result{Class: c, Source: FromLabel}
		if hasAnn && fromAnn != c {
			r.Conflict = fmt.Sprintf("label %s=%s and annotation %s=%s disagree; the label wins", LabelKoordinator, label, AnnotationOpenFuyao, ann)
		}
		return r, nil
	}
	if hasAnn {
		return Result{Class: fromAnn, Source: FromAnnotation}, nil
	}
	return Result{Class: fromKubernetes(in.CgroupParent, in.StaticCPUManager), Source: FromKubernetes}, nil
}

// Parse reads a Koordinator class name.
func Parse(s string) (Class, error) {
	switch c := Class(strings.ToUpper(strings.TrimSpace(s))); c {
	case System, LSE, LSR, LS, BE:
		return c, nil
	}
	return "", fmt.Errorf("QoS class %q: want one of SYSTEM, LSE, LSR, LS, BE: %w", s, errdefs.ErrInvalidArgument)
}

func parseOpenFuyao(s string) (Class, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case openFuyaoHighLatency:
		return LSR, nil
	case string(LS):
		return LS, nil
	case string(BE):
		return BE, nil
	}
	return "", fmt.Errorf("annotation %s=%q: want HLS, LS or BE: %w", AnnotationOpenFuyao, s, errdefs.ErrInvalidArgument)
}

// fromKubernetes reads the Kubernetes QoS class from kubelet's cgroup layout: cgroupfs
// /kubepods/besteffort/pod<uid>, /kubepods/burstable/pod<uid>, /kubepods/pod<uid> (Guaranteed), or the systemd
// slices kubepods-besteffort-pod<uid>.slice, kubepods-burstable-…, kubepods-pod<uid>.slice.
func fromKubernetes(parent string, static bool) Class {
	p := strings.ToLower(parent)
	switch {
	case strings.Contains(p, kubeQoSBestEffort):
		return BE
	case strings.Contains(p, kubeQoSBurstable):
		return LS
	case strings.Contains(p, "/kubepods/"+kubeQoSGuaranteedPod) || strings.Contains(p, kubeQoSSystemdPodPref):
		if static {
			return LSR
		}
		return LS
	}
	// No kubelet layout (a pod started by hand): the shared pool is the safe default.
	return LS
}

// Exclusive reports whether the class holds CPUs of its own, and so needs whole CPUs with request == limit.
func (c Class) Exclusive() bool { return c == LSE || c == LSR }

// ExclusiveCPUs checks what kubelet sent for a container of an exclusive class (LSE, LSR) and returns the
// number of CPUs it holds. Kubelet encodes the limit as quota/period and the request as shares
// (request × 1024 / 1000, capped at the kernel's 262144), so request == limit and whole CPUs read: quota
// is a multiple of period and the shares are those of the limit. Past 256 CPUs the capped shares cannot
// tell the request from the limit, and kubelet's conversion is trusted.
func ExclusiveCPUs(quota, period, shares int64) (int, error) {
	if quota <= 0 || period <= 0 {
		return 0, fmt.Errorf("needs a CPU limit equal to its request in whole CPUs, and has no CPU limit: %w", errdefs.ErrInvalidArgument)
	}
	if quota > cgroup.MaxQuota {
		return 0, fmt.Errorf("needs a CPU limit the kernel can enforce, and has a CFS quota of %d µs (at most %d): %w", quota, int64(cgroup.MaxQuota), errdefs.ErrInvalidArgument)
	}
	limitMilli := cgroup.Scale(quota, 1000, period)
	if quota%period != 0 {
		return 0, fmt.Errorf("needs whole CPUs with request == limit, and has a limit of %dm: %w", limitMilli, errdefs.ErrInvalidArgument)
	}
	if want := cgroup.MilliCPUToShares(limitMilli); shares != want {
		return 0, fmt.Errorf("needs request == limit in whole CPUs, and has request %dm, limit %dm: %w", cgroup.Scale(shares, 1000, 1024), limitMilli, errdefs.ErrInvalidArgument)
	}
	return int(quota / period), nil
}
