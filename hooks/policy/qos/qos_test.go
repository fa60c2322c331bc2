package qos

import (
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/hooks"
)

func TestPreCreateContainer(t *testing.T) {
	t.Parallel()
	kubelet := func(requestMilli, limitMilli int64) *hooks.Resources {
		// What kubelet sends for a container with these CPU request and limit.
		return &hooks.Resources{CPUShares: requestMilli * 1024 / 1000, CPUQuota: limitMilli * 100, CPUPeriod: 100000}
	}
	tests := []struct {
		name      string
		labels    map[string]string
		parent    string
		res       *hooks.Resources
		wantClass string
		wantOOM   int64 // 0: not set
		wantErr   bool
	}{
		{name: "LSE with 2 whole CPUs", labels: map[string]string{"koordinator.sh/qosClass": "LSE"}, res: kubelet(2000, 2000), wantClass: "LSE", wantOOM: -998},
		{name: "LSR fractional CPUs is refused", labels: map[string]string{"koordinator.sh/qosClass": "LSR"}, res: kubelet(1500, 1500), wantErr: true},
		{name: "LSE request below limit is refused", labels: map[string]string{"koordinator.sh/qosClass": "LSE"}, res: kubelet(1000, 2000), wantErr: true},
		{name: "LSE without limits is refused", labels: map[string]string{"koordinator.sh/qosClass": "LSE"}, res: &hooks.Resources{CPUShares: 2}, wantErr: true},
		{name: "LS may be fractional", labels: map[string]string{"koordinator.sh/qosClass": "LS"}, res: kubelet(1500, 3000), wantClass: "LS"},
		{name: "BE gets the highest OOM score", parent: "/kubepods/besteffort/pod1", res: &hooks.Resources{CPUShares: 2}, wantClass: "BE", wantOOM: 1000},
		{name: "unknown class is refused", labels: map[string]string{"koordinator.sh/qosClass": "GOLD"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			q, _ := New(Config{})
			pod := &hooks.PodInfo{Name: "p", Namespace: "ns", Labels: tt.labels, CgroupParent: tt.parent}
			adj, err := q.PreCreateContainer(ctx, pod, &hooks.ContainerInfo{Name: "c", Resources: tt.res})
			if tt.wantErr {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("PreCreateContainer = %+v, %v; want InvalidArgument", adj, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if adj.Annotations[AnnotationClass] != tt.wantClass {
				t.Fatalf("class annotation = %q, want %q", adj.Annotations[AnnotationClass], tt.wantClass)
			}
			var oom int64
			if adj.Resources != nil && adj.Resources.OomScoreAdj != nil {
				oom = *adj.Resources.OomScoreAdj
			}
			if oom != tt.wantOOM {
				t.Fatalf("oom_score_adj = %d, want %d", oom, tt.wantOOM)
			}
		})
	}
}
