//go:build e2e

package e2e

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/e2e/framework"
)

// TestRunQueueLatencySwitch turns the eBPF run-queue latency collector on with --run-queue-latency on the
// real tandem-proxy binary. Where this kernel lets the agent load BPF programs (these test machines do,
// as root without CAP_SYS_RESOURCE: a kernel since 5.11 needs no memlock limit lifted), a running
// container's run-queue latency must show in /metrics; where it does not, the agent must say so in one
// log line with the reason, and keep serving.
func TestRunQueueLatencySwitch(t *testing.T) {
	forEachRuntime(t, envOptions{proxyArgs: []string{"--run-queue-latency"}}, func(t *testing.T, ctx context.Context, e *env) {
		_, _, err := classPod(t, ctx, e, e.viaProxy, "busy", "LS", 0)
		if err != nil {
			t.Fatal(err)
		}
		on := regexp.MustCompile(`"Collector source on".* source="runQueue"`)
		off := regexp.MustCompile(`"Collector source off: the kernel does not offer it here".* source="runQueue" reason="([^"]+)"`)
		disabled := regexp.MustCompile(`"Collector source disabled by config".* source="runQueue"`)
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, err := os.ReadFile(e.proxy.LogPath)
			if err != nil {
				t.Fatal(err)
			}
			if disabled.Match(b) {
				t.Fatal("--run-queue-latency did not reach the collector: the agent logged the source disabled by config")
			}
			if m := off.FindSubmatch(b); m != nil {
				t.Logf("run-queue collector off on this kernel, as the agent says: %s", m[1])
				if _, err := e.viaProxy.Version(ctx, "v1"); err != nil {
					t.Fatalf("the proxy does not serve after the collector source was refused: %v", err)
				}
				return
			}
			if on.Match(b) {
				waitMetric(t, ctx, e.proxy, "tandem_container_runqueue_latency_seconds", `pod="busy"`, 30*time.Second)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the agent said nothing of the run-queue collector within 10s; log:\n%s", b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// waitMetric waits until /metrics has a series of name whose labels mention what.
func waitMetric(t *testing.T, ctx context.Context, p *framework.Proxy, name, what string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		m, err := p.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, name) && strings.Contains(line, what) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s series for %s in /metrics within %v", name, what, within)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
