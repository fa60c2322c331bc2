package qos

import (
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
)

// TestKubeletStaticCPUManager: under kubelet's static CPU manager a Guaranteed container with whole CPUs
// is LSR with kubelet's CPUs, one with a fractional request is LS (kubelet's shared pool), and the policy
// off keeps Guaranteed pods LS.
func TestKubeletStaticCPUManager(t *testing.T) {
	t.Parallel()
	guaranteed := func(milli int64) *hooks.Resources {
		return &hooks.Resources{CPUShares: milli * 1024 / 1000, CPUQuota: milli * 100, CPUPeriod: 100000, CpusetCpus: "2-3"}
	}
	tests := []struct {
		name        string
		static      bool
		labels      map[string]string
		parent      string
		res         *hooks.Resources
		wantClass   string
		wantKubelet bool
	}{
		{name: "whole CPUs are LSR with kubelet's CPUs", static: true, parent: "/kubepods/pod1", res: guaranteed(2000), wantClass: "LSR", wantKubelet: true},
		{name: "systemd driver too", static: true, parent: "/kubepods.slice/kubepods-pod1.slice", res: guaranteed(1000), wantClass: "LSR", wantKubelet: true},
		{name: "fractional CPUs run in the shared pool, not refused", static: true, parent: "/kubepods/pod1", res: guaranteed(1500), wantClass: "LS"},
		{name: "policy none keeps Guaranteed LS", parent: "/kubepods/pod1", res: guaranteed(2000), wantClass: "LS"},
		{name: "burstable stays LS", static: true, parent: "/kubepods/burstable/pod1", res: guaranteed(2000), wantClass: "LS"},
		{name: "a label wins over kubelet's policy", static: true, labels: map[string]string{"koordinator.sh/qosClass": "LSE"}, parent: "/kubepods/pod1", res: guaranteed(2000), wantClass: "LSE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			q, _ := New(Config{StaticCPUManager: tt.static})
			pod := &hooks.PodInfo{Name: "p", Namespace: "ns", Labels: tt.labels, CgroupParent: tt.parent}
			adj, err := q.PreCreateContainer(ctx, pod, &hooks.ContainerInfo{Name: "c", Resources: tt.res})
			if err != nil {
				t.Fatalf("PreCreateContainer: %v", err)
			}
			if got := adj.Annotations[AnnotationClass]; got != tt.wantClass {
				t.Errorf("class = %q, want %q", got, tt.wantClass)
			}
			if got := KubeletOwned(&hooks.ContainerInfo{Annotations: adj.Annotations}); got != tt.wantKubelet {
				t.Errorf("kubelet-owned = %v, want %v", got, tt.wantKubelet)
			}
		})
	}
}
