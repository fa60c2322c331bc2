package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/hooks/policy"
)

// sloConfig is the tandem-proxy --slo-config file of a Tandem setting.
func sloConfig(setting string, threshold int) string {
	s := "colocation-config: '{\"enable\": true}'\n"
	policy := map[string]string{settingCPUSet: "cpuset", settingCFSQuota: "cfsQuota", settingCFSQ100ms: "cfsQuota"}[setting]
	period := map[string]int{settingCFSQ100ms: 100000}[setting]
	switch {
	case period > 0:
		s += fmt.Sprintf("resource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": %d, \"cpuSuppressPolicy\": %q, \"beCFSPeriodMicros\": %d}}'\n", threshold, policy, period)
	case policy != "":
		s += fmt.Sprintf("resource-threshold-config: '{\"clusterStrategy\": {\"enable\": true, \"cpuSuppressThresholdPercent\": %d, \"cpuSuppressPolicy\": %q}}'\n", threshold, policy)
	}
	if setting == settingYield {
		s += "resource-qos-config: '{\"clusterStrategy\": {\"beClass\": {\"cpuQOS\": {\"yieldThreads\": true}}}}'\n"
	}
	if setting == settingNoSteal {
		s += "resource-threshold-config: '{\"clusterStrategy\": {\"stealHeadroom\": \"off\"}}'\n"
	}
	if setting == settingLSWait {
		s += "resource-threshold-config: '{\"clusterStrategy\": {\"lsWaitGuard\": true}}'\n"
	}
	return s
}

// proxyArgs are the tandem-proxy flags a Tandem setting adds.
func proxyArgs(setting string) []string {
	if setting == settingLSWait {
		return []string{"--run-queue-latency", "--run-queue-interval=2s"}
	}
	if only, ok := strings.CutPrefix(setting, settingWith); ok {
		return []string{"--policies=" + strings.ReplaceAll(only, "+", ",")}
	}
	if drop, ok := withoutPolicy[setting]; ok {
		var keep []string
		for _, n := range policy.Names() {
			if !slices.Contains(drop, n) {
				keep = append(keep, n)
			}
		}
		return []string{"--policies=" + strings.Join(keep, ",")}
	}
	return nil
}

// ensureTracefs mounts tracefs where tandem-proxy's run-queue collector looks first when no tracefs
// with the sched tracepoints is mounted, and returns what undoes it (nothing, if the machine had it).
func ensureTracefs(ctx context.Context) (func() error, error) {
	for _, dir := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if _, err := os.Stat(dir + "/events/sched/sched_switch"); err == nil {
			return func() error { return nil }, nil
		}
	}
	const dir = "/sys/kernel/tracing"
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		return nil, fmt.Errorf("mount tracefs on %s for the tandem-lswait setting (or leave that setting out): %w", dir, err)
	}
	klog.FromContext(ctx).Info("Mounted tracefs for the run-queue collector; unmounted at the end", "dir", dir)
	return func() error {
		if err := unix.Unmount(dir, 0); err != nil {
			return fmt.Errorf("unmount the tracefs the bench mounted (umount %s by hand): %w", dir, err)
		}
		return nil
	}, nil
}

// logGuard logs what the LS wait guard did in a round, from tandem-proxy's metrics.
func logGuard(ctx context.Context, p *framework.Proxy, round int) {
	logger := klog.FromContext(ctx)
	text, err := p.Metrics(ctx)
	if err != nil {
		logger.Error(err, "LS wait guard's counters not read")
		return
	}
	kv := []any{"round", round}
	for _, name := range []string{"tandem_interference_holds_total", "tandem_interference_releases_total", "tandem_interference_raises_total"} {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				kv = append(kv, strings.TrimPrefix(strings.TrimSuffix(name, "_total"), "tandem_interference_"), v)
			}
		}
	}
	logger.Info("LS wait guard in this round", kv...)
}
