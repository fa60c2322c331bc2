//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// memoryQoSConfig switches memory QoS on for lsClass with every key of an operator's memoryQOS set to a
// value that acts: protection and throttling (memory.min, memory.high), and the Anolis OS watermarks, OOM
// priority and group kill.
const memoryQoSConfig = `resource-qos-config: |
  {"clusterStrategy": {"lsClass": {"memoryQOS": {"enable": true, "minLimitPercent": 100, "throttlingPercent": 80,
    "wmarkRatio": 95, "wmarkScalePermill": 20, "wmarkMinAdj": -25, "priorityEnable": 1, "priority": 12,
    "oomKillGroup": 1}}}}
`

// memoryQoSKeys are the keys memoryQoSConfig sets, with their files and values.
var memoryQoSKeys = []struct{ key, file, value string }{
	{"wmarkRatio", "memory.wmark_ratio", "95"},
	{"wmarkScalePermill", "memory.wmark_scale_factor", "20"},
	{"wmarkMinAdj", "memory.wmark_min_adj", "-25"},
	{"priorityEnable", "memory.use_priority_oom", "1"},
	{"priority", "memory.priority", "12"},
	{"oomKillGroup", "memory.oom.group", "1"},
}

// TestMemoryQoSBeyondMinLowHigh runs the real tandem-proxy in front of real containerd with memory QoS on
// for lsClass, Anolis keys included, and an LS container through it. On this machine's kernel (mainline,
// cgroup v1) none of the memory QoS files exist: the container must start as it would without Tandem
// (neither runc nor the proxy may trip over a file that is not there, and the proxy counts no cgroup write
// error), the agent's /debug/config must say "ignored" for each key, naming its file, and its log must have
// the one line naming the files the kernel lacks. On a kernel that has a file (Anolis OS, cgroup v2), the
// container's cgroup must hold the configured value and the key must say "applied".
func TestMemoryQoSBeyondMinLowHigh(t *testing.T) {
	w, err := cgroup.New("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("SKIPPED: no cgroup hierarchy: %v", err)
	}
	memDir := func(rel string) string { return filepath.Join("/sys/fs/cgroup/memory", rel) }
	if w.Version() == 2 {
		memDir = func(rel string) string { return filepath.Join("/sys/fs/cgroup", rel) }
	}
	cfgFile := filepath.Join(t.TempDir(), "slo-config.yaml")
	if err := os.WriteFile(cfgFile, []byte(memoryQoSConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	forEachRuntime(t, envOptions{proxyArgs: []string{"--slo-config", cfgFile}}, func(t *testing.T, ctx context.Context, e *env) {
		cfg := qosPodConfig(t, "web-ls", "LS", "burstable")
		podID, err := e.viaProxy.RunPodSandbox(ctx, cfg, "")
		removeAtCleanup(t, ctx, e, podID)
		if err != nil {
			t.Fatalf("RunPodSandbox through the proxy with memory QoS on: %v", err)
		}
		cc := framework.ContainerConfig("app", framework.SleepCommand()...)
		cc.Linux.Resources = &runtimeapi.LinuxContainerResources{CpuShares: 1024, MemoryLimitInBytes: 64 << 20}
		ctrID, err := e.viaProxy.CreateContainer(ctx, podID, cc, cfg)
		if err != nil {
			t.Fatalf("CreateContainer through the proxy with memory QoS on: %v", err)
		}
		if err := e.viaProxy.StartContainer(ctx, ctrID); err != nil {
			t.Fatalf("StartContainer through the proxy with memory QoS on: %v", err)
		}
		st, err := e.direct.ContainerStatus(ctx, ctrID, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			t.Fatalf("container state = %s, want running", st.Status.State)
		}
		// An update writes the container's files again (cgroup v1) or has runc write them (v2).
		if err := e.viaProxy.UpdateContainerResources(ctx, ctrID,
			&runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 96 << 20}}); err != nil {
			t.Fatalf("UpdateContainerResources through the proxy with memory QoS on: %v", err)
		}
		metrics, err := e.proxy.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^tandem_proxy_(pod|container)_cgroup_errors_total(\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(metrics, -1) {
			if m[3] != "0" {
				t.Errorf("the proxy failed a cgroup write: %s", m[0])
			}
		}

		code, body, err := e.proxy.GetDebug(ctx, "/debug/config")
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusOK {
			t.Fatalf("/debug/config answered %d: %s", code, body)
		}
		var rep struct {
			Keys []struct{ Section, Key, Value, State, Detail string }
		}
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatalf("decode /debug/config: %v", err)
		}
		states := map[string]struct{ value, state, detail string }{}
		for _, k := range rep.Keys {
			if k.Section == "resource-qos-config" {
				states[k.Key] = struct{ value, state, detail string }{k.Value, k.State, k.Detail}
			}
		}
		logs, err := os.ReadFile(e.proxy.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		var ignoredLine string
		for _, l := range strings.Split(string(logs), "\n") {
			if strings.Contains(l, "Memory QoS settings ignored") {
				if ignoredLine != "" {
					t.Errorf("more than one ignored-settings line for one configuration:\n%s\n%s", ignoredLine, l)
				}
				ignoredLine = l
			}
		}
		ctrDir := memDir(filepath.Join(cfg.Linux.CgroupParent, ctrID))
		for _, k := range memoryQoSKeys {
			s := states["lsClass.memoryQOS."+k.key]
			if s.value != k.value {
				t.Errorf("lsClass.memoryQOS.%s: /debug/config says value %q, the configuration %s", k.key, s.value, k.value)
			}
			if !w.Supports(k.file) {
				if s.state != "ignored" || !strings.Contains(s.detail, k.file) {
					t.Errorf("lsClass.memoryQOS.%s = %s (%s), want ignored naming %s, which this kernel lacks", k.key, s.state, s.detail, k.file)
				}
				if !strings.Contains(ignoredLine, k.file) {
					t.Errorf("the proxy's log has no line naming the missing %s (line: %q)", k.file, ignoredLine)
				}
				continue
			}
			if s.state != "applied" {
				t.Errorf("lsClass.memoryQOS.%s = %s (%s), want applied: the kernel has %s", k.key, s.state, s.detail, k.file)
			}
			b, err := os.ReadFile(filepath.Join(ctrDir, k.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(b)); got != k.value {
				t.Errorf("%s of the running container = %s, want %s", k.file, got, k.value)
			}
		}
		for _, key := range []string{"pageCacheLimitEnable", "pageCacheLimitSync", "pageCacheLimitSize"} {
			if s := states["lsClass.memoryQOS."+key]; s.state != "unsupported" {
				t.Errorf("lsClass.memoryQOS.%s = %s, want unsupported", key, s.state)
			}
		}
		if s := states["beClass.memoryQOS.wmarkRatio"]; s.state != "off" {
			t.Errorf("beClass.memoryQOS.wmarkRatio = %s (%s), want off: beClass is disabled", s.state, s.detail)
		}
	})
}
