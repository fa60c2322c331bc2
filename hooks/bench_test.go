package hooks

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/klog/v2"
)

// BenchmarkDispatch measures the dispatcher's own cost per PreCreateContainer for 0, 1 and 5 in-process
// hooks that each change one field (the target is ≤ 20 µs for 5 hooks).
func BenchmarkDispatch(b *testing.B) {
	for _, n := range []int{0, 1, 5} {
		b.Run(fmt.Sprintf("hooks=%d", n), func(b *testing.B) {
			ctx := klog.NewContext(b.Context(), klog.Background().V(1))
			var regs []Registration
			for i := range n {
				// Each hook owns its own field, as real policies do (qos, cpuset, batch, burst, ...).
				adj := []*Adjustment{
					{Resources: &ResourceAdjustment{CPUShares: Int64(512)}},
					{Resources: &ResourceAdjustment{CpusetCpus: String("2-15")}},
					{Resources: &ResourceAdjustment{CPUQuota: Int64(200000)}},
					{Annotations: map[string]string{"tandem.io/qos": "LS"}},
					{PodResources: &ResourceAdjustment{Unified: map[string]string{"cpu.idle": "1"}}},
				}[i]
				regs = append(regs, Registration{Name: fmt.Sprintf("h%d", i), Order: 100 * (i + 1), New: func() (Hook, error) {
					return benchHook{name: fmt.Sprintf("h%d", i), adj: adj}, nil
				}})
			}
			d, err := NewDispatcher(ctx, regs, nil)
			if err != nil {
				b.Fatal(err)
			}
			pod, ctr := testPod(), testCtr()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Run(ctx, PreCreateContainer, pod, ctr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type benchHook struct {
	name string
	adj  *Adjustment
}

func (h benchHook) Name() string { return h.name }
func (h benchHook) PreCreateContainer(_ context.Context, _ *PodInfo, _ *ContainerInfo) (*Adjustment, error) {
	return h.adj, nil
}
