package batchresource

import (
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
)

const seedSpec = `{"containers":{"nginx":{"requests":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"1Gi"},"limits":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"1Gi"}},"sidecar":{"requests":{"kubernetes.io/batch-cpu":"500"}}}}`

func bePod(ann string) *hooks.PodInfo {
	a := map[string]string{qos.AnnotationClass: "BE"}
	if ann != "" {
		a["node.koordinator.sh/extended-resource-spec"] = ann
	}
	return &hooks.PodInfo{Name: "nginx-be", Namespace: "default", Annotations: a}
}

func TestPreCreateContainer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		pod                   *hooks.PodInfo
		ctr                   string
		wantShares, wantQuota int64
		wantMemory            int64
		wantNil, wantErr      bool
	}{
		{name: "seed 000 BE container: 2 batch CPUs", pod: bePod(seedSpec), ctr: "nginx", wantShares: 2048, wantQuota: 200000, wantMemory: 1 << 30},
		{name: "request only: unlimited quota", pod: bePod(seedSpec), ctr: "sidecar", wantShares: 512, wantQuota: -1},
		{name: "container not in the spec", pod: bePod(seedSpec), ctr: "other", wantNil: true},
		{name: "no annotation: plain BE", pod: bePod(""), ctr: "nginx", wantNil: true},
		{name: "LS pod is not touched", pod: &hooks.PodInfo{Annotations: map[string]string{qos.AnnotationClass: "LS", "node.koordinator.sh/extended-resource-spec": seedSpec}}, ctr: "nginx", wantNil: true},
		{name: "malformed annotation", pod: bePod(`{"containers":`), ctr: "nginx", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			b, _ := New(DefaultConfig())
			adj, err := b.PreCreateContainer(ctx, tt.pod, &hooks.ContainerInfo{Name: tt.ctr})
			if tt.wantErr {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("err = %v, want InvalidArgument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantNil {
				if adj != nil {
					t.Fatalf("adjustment %+v, want none", adj)
				}
				return
			}
			r := adj.Resources
			if *r.CPUShares != tt.wantShares || *r.CPUQuota != tt.wantQuota || *r.CPUPeriod != 100000 {
				t.Fatalf("shares %d quota %d period %d; want %d %d 100000", *r.CPUShares, *r.CPUQuota, *r.CPUPeriod, tt.wantShares, tt.wantQuota)
			}
			var mem int64
			if r.MemoryLimitInBytes != nil {
				mem = *r.MemoryLimitInBytes
			}
			if mem != tt.wantMemory {
				t.Fatalf("memory limit %d, want %d", mem, tt.wantMemory)
			}
		})
	}
}

func TestPodLevelSums(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	b, _ := New(DefaultConfig())
	adj, err := b.PreRunPodSandbox(ctx, bePod(seedSpec))
	if err != nil {
		t.Fatal(err)
	}
	r := adj.PodResources
	// 2000m + 500m requested; the sidecar has no limit, so the pod has none either.
	if *r.CPUShares != 2560 || *r.CPUQuota != -1 || *r.MemoryLimitInBytes != -1 {
		t.Fatalf("pod resources shares %d quota %d memory %d; want 2560, -1, -1", *r.CPUShares, *r.CPUQuota, *r.MemoryLimitInBytes)
	}
}
