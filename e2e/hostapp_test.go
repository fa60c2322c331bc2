//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandemkit/tandem/config/knob"
)

// hostAppControllers are the v1 hierarchies a host application's cgroup lives in: cpuset and cpu for its
// treatment, cpuacct and memory for the collector (this machine mounts cpu and cpuacct apart).
var hostAppControllers = []string{"cpuset", "cpu", "cpuacct", "memory"}

// hostCgroup makes rel in every hierarchy of hostAppControllers, as an operator following Koordinator's
// manual would (cpuset.cpus and cpuset.mems copied from the parent), and removes what it made when the
// test ends, deepest first. Directories that were there are left alone.
func hostCgroup(t *testing.T, rel string) {
	t.Helper()
	for _, ctrl := range hostAppControllers {
		var made []string
		for p := rel; p != "." && p != "/"; p = filepath.Dir(p) {
			dir := filepath.Join("/sys/fs/cgroup", ctrl, p)
			if _, err := os.Stat(dir); err == nil {
				break
			}
			made = append([]string{dir}, made...)
		}
		for _, dir := range made {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatalf("create cgroup %s: %v", dir, err)
			}
			if ctrl == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					writeHostFile(t, filepath.Join(dir, f), readHostFile(t, filepath.Join(filepath.Dir(dir), f)))
				}
			}
		}
		t.Cleanup(func() {
			for i := len(made) - 1; i >= 0; i-- {
				// A cgroup just emptied may refuse for a moment (EBUSY).
				for try := 0; try < 50; try++ {
					if err := os.Remove(made[i]); err == nil || os.IsNotExist(err) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
}

func readHostFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeHostFile(t *testing.T, p, v string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		t.Fatalf("write %q to %s: %v", v, p, err)
	}
}

// busyIn starts a shell spinning a CPU and moves it into rel in every hierarchy; it is killed (and
// reaped, so that its cgroups can go) when the test ends.
func busyIn(t *testing.T, rel string) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	for _, ctrl := range hostAppControllers {
		writeHostFile(t, filepath.Join("/sys/fs/cgroup", ctrl, rel, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid))
	}
}

// writeHostAppConfig replaces the slo-config file as a mounted ConfigMap is replaced: a new file renamed over.
func writeHostAppConfig(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func hostAppConfig(apps ...string) string {
	return "host-application-config: |\n  {\"applications\": [" + strings.Join(apps, ", ") + "]}\n"
}

// hostAppKnob reads /debug/config's entry for one application.
func hostAppKnob(t *testing.T, ctx context.Context, e *env, name string) (knob.Status, bool) {
	t.Helper()
	return debugKnob(t, ctx, e, "host-application-config", "applications["+name+"]")
}

// debugKnob reads one key's entry of the agent's /debug/config (what tandemctl config shows).
func debugKnob(t *testing.T, ctx context.Context, e *env, section, key string) (knob.Status, bool) {
	t.Helper()
	code, body, err := e.proxy.GetDebug(ctx, "/debug/config")
	if err != nil || code != 200 {
		t.Fatalf("/debug/config: %d %v %s", code, err, body)
	}
	var rep struct {
		Keys []knob.Status `json:"keys"`
	}
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatalf("/debug/config: %v: %s", err, body)
	}
	for _, k := range rep.Keys {
		if k.Section == section && k.Key == key {
			return k, true
		}
	}
	return knob.Status{}, false
}

// hostAppEventually retries check every 100ms until it returns "" or within has passed, then fails with its last
// answer.
func hostAppEventually(t *testing.T, within time.Duration, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, within, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHostApplication lists three host applications in --slo-config's host-application-config and runs
// the real tandem-proxy binary against real containerd and this machine's real cgroup v1 hierarchies:
//
//   - an LS one with a spinning shell in host-latency-sensitive/<x>: its cpuset.cpus becomes the LS pool,
//     which an LSR pod taking a CPU narrows to the other CPU, and /metrics counts its CPU as LS;
//   - a BE one in host-best-effort/<x>: the BE pool (both CPUs: LSR CPUs are shared with BE) and
//     cpu.idle 1;
//   - an LS one whose cgroup is made only after the proxy started: treated once it appears.
//
// Taking the applications out of the configuration writes back what the proxy found; so does stopping
// the proxy, for the one listed again.
func TestHostApplication(t *testing.T) {
	requireRoot(t)
	if n := runtime.NumCPU(); n != 2 {
		t.Skipf("SKIPPED: the pools asserted here are for a 2-CPU machine, this one has %d", n)
	}
	for _, ctrl := range hostAppControllers {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", ctrl, "cgroup.procs")); err != nil {
			t.Skipf("SKIPPED: no cgroup v1 %s hierarchy (this test uses the machine's real v1 cgroups): %v", ctrl, err)
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.idle"); err != nil {
		t.Skip("SKIPPED: the kernel has no cpu.idle (Linux 5.15+)")
	}
	all := readHostFile(t, "/sys/fs/cgroup/cpuset/cpuset.cpus")
	cfgFile := filepath.Join(t.TempDir(), "slo-config.yaml")
	forEachRuntime(t, envOptions{proxyArgs: []string{"--slo-config", cfgFile}}, func(t *testing.T, ctx context.Context, e *env) {
		suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
		lsName, beName, lateName := "web-"+suffix, "batch-"+suffix, "late-"+suffix
		lsRel, beRel, lateRel := "host-latency-sensitive/"+lsName, "host-best-effort/"+beName, "host-latency-sensitive/"+lateName
		hostCgroup(t, lsRel)
		hostCgroup(t, beRel)
		busyIn(t, lsRel)
		busyIn(t, beRel)
		apps := []string{
			fmt.Sprintf(`{"name": %q, "qos": "LS", "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/", "relativePath": %q}}`, lsName, lsName+"/"),
			fmt.Sprintf(`{"name": %q, "qos": "BE"}`, beName),
			fmt.Sprintf(`{"name": %q, "qos": "LS"}`, lateName),
		}
		// The proxy started before the file existed: it applies it once it appears.
		writeHostAppConfig(t, cfgFile, hostAppConfig(apps...))
		cpus := func(rel string) string {
			return readHostFile(t, filepath.Join("/sys/fs/cgroup/cpuset", rel, "cpuset.cpus"))
		}
		idle := func(rel string) string { return readHostFile(t, filepath.Join("/sys/fs/cgroup/cpu", rel, "cpu.idle")) }

		// An LSR pod takes one CPU: the LS pool is the other, BE keeps both.
		_, lsr, err := classPod(t, ctx, e, e.viaProxy, "db-lsr", "LSR", 1000)
		if err != nil {
			t.Fatal(err)
		}
		exclusive := cpusetOf(t, ctx, e, lsr)
		pools := poolsOf(t, ctx, e)
		if pools.LS == pools.BE || pools.LSR != exclusive {
			t.Fatalf("pools %+v: want an LSR CPU %s and an LS pool narrower than BE's", pools, exclusive)
		}
		hostAppEventually(t, 15*time.Second, "LS application on the LS pool", func() string {
			if got := cpus(lsRel); got != pools.LS {
				return fmt.Sprintf("cpuset.cpus %s, want %s", got, pools.LS)
			}
			return ""
		})
		hostAppEventually(t, 15*time.Second, "BE application on the BE pool with cpu.idle", func() string {
			if got, gotIdle := cpus(beRel), idle(beRel); got != pools.BE || gotIdle != "1" {
				return fmt.Sprintf("cpuset.cpus %s, cpu.idle %s; want %s and 1", got, gotIdle, pools.BE)
			}
			return ""
		})
		if got := idle(lsRel); got != "0" {
			t.Errorf("LS application cpu.idle %s, want 0: LS is not idled", got)
		}
		if k, _ := hostAppKnob(t, ctx, e, lsName); k.State != knob.Applied || !strings.Contains(k.Detail, "/"+lsRel) {
			t.Errorf("/debug/config for %s = %+v, want applied naming its cgroup", lsName, k)
		}
		if k, _ := hostAppKnob(t, ctx, e, lateName); k.State != knob.Ignored || !strings.Contains(k.Detail, "does not exist") {
			t.Errorf("/debug/config for %s = %+v, want ignored: its cgroup does not exist yet", lateName, k)
		}

		// The spinning LS application is LS use in the collector's metrics.
		series := regexp.MustCompile(`tandem_host_application_cpu_usage_cores\{application="` + lsName + `",node="[^"]*",qos="LS"\} ([0-9.e+-]+)`)
		hostAppEventually(t, 15*time.Second, "LS application's usage in /metrics", func() string {
			m, err := e.proxy.Metrics(ctx)
			if err != nil {
				return err.Error()
			}
			match := series.FindStringSubmatch(m)
			if match == nil {
				return "no tandem_host_application_cpu_usage_cores series for " + lsName
			}
			if v, _ := strconv.ParseFloat(match[1], 64); v < 0.05 {
				return fmt.Sprintf("usage %s cores of a spinning shell", match[1])
			}
			return ""
		})

		// A listed cgroup that appears is treated.
		hostCgroup(t, lateRel)
		hostAppEventually(t, 15*time.Second, "the late application treated once its cgroup exists", func() string {
			if got := cpus(lateRel); got != pools.LS {
				return fmt.Sprintf("cpuset.cpus %s, want %s", got, pools.LS)
			}
			if k, _ := hostAppKnob(t, ctx, e, lateName); k.State != knob.Applied {
				return fmt.Sprintf("/debug/config %+v", k)
			}
			return ""
		})

		// Missing for several passes, said once.
		logged, err := os.ReadFile(e.proxy.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(string(logged), "\n") {
			if strings.Contains(line, "Host application cgroup does not exist") && strings.Contains(line, lateName) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("the missing cgroup of %s was logged %d times, want once", lateName, n)
		}

		// Out of the configuration: what the proxy found is written back.
		writeHostAppConfig(t, cfgFile, hostAppConfig(apps[2]))
		hostAppEventually(t, 15*time.Second, "applications taken out of the configuration restored", func() string {
			if got, gotBE, gotIdle := cpus(lsRel), cpus(beRel), idle(beRel); got != all || gotBE != all || gotIdle != "0" {
				return fmt.Sprintf("LS cpuset.cpus %s, BE cpuset.cpus %s, BE cpu.idle %s; want %s, %s, 0", got, gotBE, gotIdle, all, all)
			}
			return ""
		})
		if got := cpus(lateRel); got != pools.LS {
			t.Errorf("late application cpuset.cpus %s, want %s: it is still listed", got, pools.LS)
		}

		// The proxy stops: the application still listed is restored too.
		if _, err := e.proxy.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if got := cpus(lateRel); got != all {
			t.Errorf("late application cpuset.cpus %s after the proxy stopped, want %s back", got, all)
		}
	})
}
