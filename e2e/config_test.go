//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/e2e/framework"
)

// sysctlAtCleanup records a /proc/sys file now and writes it back when the test ends, whatever the agent
// under test did or failed to do.
func sysctlAtCleanup(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("/proc/sys", name)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	t.Cleanup(func() {
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Errorf("restore %s to %s: %v", p, v, err)
		}
	})
	return v
}

// TestTandemctlConfigSeed004 starts the real tandem-proxy on an operator's whole slo-controller-config
// (testdata/seed004.yaml: the defaults Koordinator ships plus a system-config, as a file, on a node
// labelled as its anolis strategies select) and checks what `tandemctl config` tells the operator. As
// written, its system-config lacks a comma: that section is one refused row naming the line, and its keys
// are off. Once the operator fixes the file, every key of every section is listed in one of the five
// states, none is left without a place, and the keys this machine can and cannot act on show as such: the
// sysctls of system-config applied (and the real files hold the formula's values), the Anolis memcg reaper
// ignored on this mainline kernel, the CFS quota burst of the anolis strategy applied, the operator's host
// application (whose cgroup does not exist here) ignored and retried, block I/O QoS unsupported. The
// sysctls are put back when the test ends.
func TestTandemctlConfigSeed004(t *testing.T) {
	requireRoot(t)
	sysctlAtCleanup(t, "vm/min_free_kbytes")
	sysctlAtCleanup(t, "vm/watermark_scale_factor")
	root, err := framework.RepoRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(root, "config/slo/testdata/seed004.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The operator's system-config lacks the comma after clusterStrategy; its fix, below.
	broken := "      }\n      \"nodeStrategies\""
	if !strings.Contains(string(seed), broken) {
		t.Fatal("the operator's system-config no longer lacks its comma; update this test")
	}
	fixed := strings.Replace(string(seed), broken, "      },\n      \"nodeStrategies\"", 1)
	file := filepath.Join(t.TempDir(), "slo-config.yaml")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	forEachRuntime(t, envOptions{proxyArgs: []string{"--slo-config", file, "--node-labels", "kubernetes.io/kernel=anolis"}}, func(t *testing.T, ctx context.Context, e *env) {
		// The file is shared by the runtimes' subtests, and the previous one left it fixed: the agent starts
		// again on the operator's file as written, as an operator's first start would.
		if err := os.WriteFile(file, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := e.proxy.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		waitVersion(t, ctx, e)
		bin := buildTandemctl(t, ctx)
		rep := configReport(t, ctx, bin, e)
		if s := rep["system-config "]; s.State != "refused" || !strings.Contains(s.Detail, "line 7") {
			t.Errorf("the operator's slo-controller-config as written: system-config row %+v, want refused naming line 7 (the missing comma)", s)
		}
		if s := rep["system-config minFreeKbytesFactor"]; s.State != "off" {
			t.Errorf("the operator's slo-controller-config as written: minFreeKbytesFactor %+v, want off (the refused section keeps its defaults)", s)
		}

		// The operator fixes the comma; the file is read again.
		if err := os.WriteFile(file, []byte(fixed), 0o600); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for _, refused := rep["system-config "]; refused || rep["system-config minFreeKbytesFactor"].State != "applied"; _, refused = rep["system-config "] {
			if time.Now().After(deadline) {
				t.Fatalf("system-config not applied 10s after the fix: %+v", rep["system-config minFreeKbytesFactor"])
			}
			time.Sleep(200 * time.Millisecond)
			rep = configReport(t, ctx, bin, e)
		}
		if _, ok := rep["system-config "]; ok {
			t.Error("system-config still listed as refused after the fix")
		}
		got := map[string]string{}
		sections := map[string]int{}
		for _, k := range rep {
			switch k.State {
			case "applied", "off", "ignored", "refused", "unsupported":
			default:
				t.Errorf("%s %s: state %q", k.Section, k.Key, k.State)
			}
			if strings.Contains(k.Detail, "no rule says") || strings.Contains(k.Detail, "is not running on this node") {
				t.Errorf("%s %s: %s (%s)", k.Section, k.Key, k.State, k.Detail)
			}
			got[k.Section+" "+k.Key] = k.State
			sections[k.Section]++
		}
		for _, s := range []string{"colocation-config", "resource-threshold-config", "resource-qos-config", "cpu-burst-config", "system-config", "host-application-config"} {
			if sections[s] == 0 {
				t.Errorf("no key of %s listed", s)
			}
		}
		for key, want := range map[string]string{
			"system-config minFreeKbytesFactor":                     "applied",
			"system-config watermarkScaleFactor":                    "applied",
			"system-config memcgReapBackGround":                     "ignored",
			"resource-qos-config lsClass.memoryQOS.wmarkRatio":      "off",         // the operator's config leaves every class's memoryQOS disabled
			"resource-qos-config beClass.blkioQOS.enable":           "off",         // applied where enabled; the operator's config leaves it off
			"resource-qos-config lsClass.blkioQOS.enable":           "unsupported", // beClass only, as koordlet
			"cpu-burst-config policy":                               "applied",
			"cpu-burst-config cfsQuotaBurstPercent":                 "applied",
			"host-application-config applications[nginx]":           "ignored",
			"resource-threshold-config cpuSuppressThresholdPercent": "off", // and resource-threshold-config too
			"colocation-config midReclaimMode":                      "unsupported",
		} {
			if got[key] != want {
				t.Errorf("%s: %q, want %s", key, got[key], want)
			}
		}
		if v := strings.TrimSpace(readFile(t, "/proc/sys/vm/watermark_scale_factor")); v != "150" {
			t.Errorf("/proc/sys/vm/watermark_scale_factor = %s while system-config says 150 and tandemctl says applied", v)
		}
		var memKB int64
		for _, line := range strings.Split(readFile(t, "/proc/meminfo"), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" {
				memKB, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
		if v, want := strings.TrimSpace(readFile(t, "/proc/sys/vm/min_free_kbytes")), strconv.FormatInt(100*memKB/10000, 10); v != want {
			t.Errorf("/proc/sys/vm/min_free_kbytes = %s, want %s (100 × MemTotal %d kB / 10000)", v, want, memKB)
		}
		table, err := tandemctl(t, ctx, bin, "--proxy-debug-socket", e.proxy.DebugSocket, "config", "--state", "ignored,refused")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("tandemctl config --state ignored,refused:\n%s", table)
	})
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type configRow struct{ Section, Key, Value, State, Detail string }

// configReport runs `tandemctl config -o json` and indexes its rows by "section key".
func configReport(t *testing.T, ctx context.Context, bin string, e *env) map[string]configRow {
	t.Helper()
	out, err := tandemctl(t, ctx, bin, "--proxy-debug-socket", e.proxy.DebugSocket, "config", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Keys []configRow }
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("tandemctl config -o json: %v\n%s", err, out)
	}
	m := make(map[string]configRow, len(rep.Keys))
	for _, k := range rep.Keys {
		m[k.Section+" "+k.Key] = k
	}
	return m
}
