//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// The real node-wide settings system-config writes: this machine has both (and not Anolis's memcg
// reaper, which resource/sysconfig's tests cover on a fake tree).
const (
	minFreeKbytesPath        = "/proc/sys/vm/min_free_kbytes"
	watermarkScaleFactorPath = "/proc/sys/vm/watermark_scale_factor"
)

// systemConfigSection is an operator's system-config, as Koordinator's documentation writes it (with
// the comma its text lacks).
const systemConfigSection = `system-config: |
  {"clusterStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 0}}
`

// otherSection keeps the file a valid slo-config without system-config.
const otherSection = `cpu-burst-config: |
  {"clusterStrategy": {"policy": "none"}}
`

func readSysctl(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeSysctl(path, v string) error { return os.WriteFile(path, []byte(v), 0o644) }

// TestSystemConfigOnTheNode: tandem-proxy, started with an slo-config file that has the operator's
// system-config, writes the real min_free_kbytes (100 × MemTotal / 10000) and watermark_scale_factor
// (150); puts the node's values back when the section goes, when it is stopped, and when it was SIGKILLed
// and is stopped after a restart (from the record it keeps in its state directory).
func TestSystemConfigOnTheNode(t *testing.T) {
	requireRoot(t)
	origMin, origWSF := readSysctl(t, minFreeKbytesPath), readSysctl(t, watermarkScaleFactorPath)
	// First registered, so it runs last, after the proxy is stopped: the node gets its values back
	// whatever happened.
	t.Cleanup(func() {
		for path, v := range map[string]string{minFreeKbytesPath: origMin, watermarkScaleFactorPath: origWSF} {
			b, err := os.ReadFile(path)
			if err == nil && strings.TrimSpace(string(b)) == v {
				continue
			}
			if err := writeSysctl(path, v); err != nil {
				t.Errorf("restore %s to %s: %v", path, v, err)
			}
		}
	})
	memTotal := memTotalKB(t)
	wantMin := strconv.FormatInt(100*memTotal/10000, 10)
	if wantMin == origMin || origWSF == "150" {
		t.Skipf("SKIPPED: the node already holds the values the operator's system-config asks for (min_free_kbytes %s, watermark_scale_factor %s): a write could not be told apart", origMin, origWSF)
	}
	applied := map[string]string{minFreeKbytesPath: wantMin, watermarkScaleFactorPath: "150"}
	originals := map[string]string{minFreeKbytesPath: origMin, watermarkScaleFactorPath: origWSF}
	t.Logf("MemTotal %d kB: the operator's system-config gives min_free_kbytes %s (the node has %s) and watermark_scale_factor 150 (it has %s)",
		memTotal, wantMin, origMin, origWSF)

	cfgFile := filepath.Join(t.TempDir(), "slo-config.yaml")
	writeConfig := func(text string) {
		t.Helper()
		// Written aside and renamed in, as kubelet swaps a mounted ConfigMap: the proxy never reads half a file.
		tmp := cfgFile + ".new"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(systemConfigSection)

	_, ctx := ktesting.NewTestContext(t)
	e := newEnv(t, ctx, flavors()[0], envOptions{proxyArgs: []string{"--slo-config", cfgFile}})
	record := filepath.Join(e.proxy.StateDir, "sysconfig-originals.json")

	waitSysctls(t, "started with system-config", applied)
	metrics, err := e.proxy.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`tandem_sysconfig_state{key="minFreeKbytesFactor",state="applied"} 1`,
		`tandem_sysconfig_state{key="watermarkScaleFactor",state="applied"} 1`,
		// Anolis's memcg reaper, found missing at run time on this mainline kernel.
		`tandem_sysconfig_state{key="memcgReapBackGround",state="ignored"} 1`,
		fmt.Sprintf(`tandem_sysconfig_value{file=%q} %s`, minFreeKbytesPath, wantMin),
	} {
		if !strings.Contains(metrics, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
	if _, err := os.Stat(record); err != nil {
		t.Errorf("no record of the originals while Tandem's values are in force: %v", err)
	}

	writeConfig(otherSection)
	waitSysctls(t, "section removed", originals)

	writeConfig(systemConfigSection)
	waitSysctls(t, "section back", applied)
	stopProxy(t, ctx, e)
	checkSysctls(t, "after SIGTERM", originals)
	if _, err := os.Stat(record); err == nil {
		t.Errorf("record %s left after the originals were restored", record)
	}

	// SIGKILL: nothing restores, the record stays; the next run restores from it when it stops.
	if err := e.proxy.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitSysctls(t, "restarted", applied)
	if err := e.proxy.Kill(); err != nil {
		t.Fatal(err)
	}
	checkSysctls(t, "after SIGKILL", applied)
	if _, err := os.Stat(record); err != nil {
		t.Fatalf("no record after SIGKILL: %v", err)
	}
	if err := e.proxy.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitSysctls(t, "restarted after SIGKILL", applied)
	stopProxy(t, ctx, e)
	checkSysctls(t, "stopped after SIGKILL and restart", originals)

	// SIGKILL, and the section removed before the next start: the new run restores at once.
	if err := e.proxy.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitSysctls(t, "restarted again", applied)
	if err := e.proxy.Kill(); err != nil {
		t.Fatal(err)
	}
	writeConfig(otherSection)
	if err := e.proxy.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitSysctls(t, "restarted without the section after SIGKILL", originals)
}

func stopProxy(t *testing.T, ctx context.Context, e *env) {
	t.Helper()
	code, err := e.proxy.Stop(ctx)
	if err != nil {
		t.Fatalf("stop tandem-proxy: %v", err)
	}
	if code != 0 {
		t.Fatalf("tandem-proxy exited with %d on SIGTERM", code)
	}
}

func memTotalKB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// checkSysctls fails unless every file holds its value now.
func checkSysctls(t *testing.T, step string, want map[string]string) {
	t.Helper()
	for path, v := range want {
		if got := readSysctl(t, path); got != v {
			t.Fatalf("%s: %s = %s, want %s", step, path, got, v)
		}
	}
}

// waitSysctls waits until every file holds its value: a file change reaches the proxy after a debounce.
func waitSysctls(t *testing.T, step string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := true
		for path, v := range want {
			if readSysctl(t, path) != v {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			checkSysctls(t, step+" (after 15s)", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
