package suppress

import (
	"context"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// TestWarnCFSQuota: choosing cfsQuota suppression with a period under a second logs a warning once,
// again only after it was switched off and on; with a 1 s period, none.
func TestWarnCFSQuota(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	on := DefaultConfig()
	on.Enable, on.CPUSuppressPolicy = true, PolicyCFSQuota
	cpuset := on
	cpuset.CPUSuppressPolicy = PolicyCPUSet
	warned := false
	long := on
	long.CFSPeriodMicros = 1000000
	for _, c := range []Config{on, on, cpuset, on, long} {
		warned = warnCFSQuota(ctx, c, warned)
	}
	got := strings.Count(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), "Warning: cfsQuota CPU suppression")
	if got != 2 {
		t.Fatalf("%d warnings for cfsQuota on, on, cpuset, on, on at 1 s; want 2", got)
	}
}
