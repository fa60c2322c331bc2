package quotaburst

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/resource/qos"
)

// BenchmarkStep100 is what one step of the loop costs a node with 100 LS containers (one per pod, each
// with a 2-CPU limit), on the fake tree: idle, none throttled (the common case: nothing but reads), and
// every container throttled on an idle pool (a raise a step, each a pod and a container write, until
// the ceiling). The loop steps once a second.
func BenchmarkStep100(b *testing.B) {
	cfg := cpuburst.Config{Policy: "cfsQuotaBurstOnly", CFSQuotaBurstPercent: 300, CFSQuotaBurstPeriodSeconds: -1, SharePoolThresholdPercent: 50}
	var pods []podSpec
	var ids []string
	for i := range 100 {
		id := fmt.Sprintf("c%03d", i)
		pods = append(pods, podSpec{id: fmt.Sprintf("p%03d", i), quota: 200000, ctrs: []ctrSpec{{id: id, class: qos.LS, quota: 200000}}})
		ids = append(ids, id)
	}
	for _, bc := range []struct {
		name      string
		throttled []string
	}{{"idle", nil}, {"all-throttled", ids}} {
		b.Run(bc.name, func(b *testing.B) {
			h := newHarness(b, cfg, pods...)
			h.w.kernel = true // measure the loop, not the fake tree's rule checks
			// Logs cost more than the step; a node logs at the default verbosity, where raises are one line each.
			ctx := klog.NewContext(context.Background(), logr.Discard())
			b.ReportAllocs()
			for b.Loop() {
				h.l.Step(ctx, h.sample(200, bc.throttled...))
				// Back to the base, so every step of the throttled case raises again.
				if bc.throttled != nil {
					b.StopTimer()
					if err := h.l.ResetAll(ctx, "bench"); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
		})
	}
}
