//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/e2e/framework"
)

// metricValue finds a sample of name whose labels include every label=value in want.
func metricValue(text, name string, want ...string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && (len(want) > 0 || !strings.HasPrefix(line, name+" ")) {
			continue
		}
		ok := true
		for _, w := range want {
			if !strings.Contains(line, w) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			return v, true
		}
	}
	return 0, false
}

// TestCollectorsOnRealContainers: the real tandem-proxy binary measures real containers of real
// containerd through their cgroups: a container spinning a CPU shows up with about one core of usage,
// an idle one with almost none, and both with a working set, labelled as Prometheus users expect.
func TestCollectorsOnRealContainers(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		cfg := framework.PodSandboxConfig("spinner", "e2e", true)
		cfg.Labels["koordinator.sh/qosClass"] = "LS"
		podID, err := e.viaProxy.RunPodSandbox(ctx, cfg, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = framework.RemovePod(context.WithoutCancel(ctx), e.direct, podID) })
		for _, c := range []struct{ name, cmd string }{
			{"spin", "while :; do :; done"},
			{"idle", "trap 'exit 0' TERM; sleep 3600 & wait"},
		} {
			id, err := e.viaProxy.CreateContainer(ctx, podID, framework.ContainerConfig(c.name, "/bin/sh", "-c", c.cmd), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.viaProxy.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		labels := func(c string) []string {
			return []string{`namespace="e2e"`, `pod="spinner"`, `container="` + c + `"`, `qos="LS"`}
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			text, err := e.proxy.Metrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			spin, ok1 := metricValue(text, "tandem_container_cpu_usage_cores", labels("spin")...)
			idle, ok2 := metricValue(text, "tandem_container_cpu_usage_cores", labels("idle")...)
			mem, ok3 := metricValue(text, "tandem_container_memory_working_set_bytes", labels("idle")...)
			node, ok4 := metricValue(text, "tandem_node_cpu_usage_cores")
			// The spinner gets at least a fifth of a core even on a busy 2-CPU machine.
			if ok1 && ok2 && ok3 && ok4 && spin > 0.2 && idle < spin/2 && mem > 0 && node >= spin*0.9 {
				t.Logf("spin %.2f cores, idle %.3f cores (working set %.0f bytes), node %.2f cores", spin, idle, mem, node)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("collector figures not right within 30s: spin %.2f (%v), idle %.3f (%v), idle memory %.0f (%v), node %.2f (%v)", spin, ok1, idle, ok2, mem, ok3, node, ok4)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}
