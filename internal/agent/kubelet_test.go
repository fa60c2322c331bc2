package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubeletSettings: kubelet's cgroup driver and CPU manager policy come from the flags, else from
// kubelet's configuration file, else kubelet's defaults; the static policy makes Guaranteed pods LSR.
func TestKubeletSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	static := write("static.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
	plain := write("plain.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	broken := write("broken.yaml", "cpuManagerPolicy: [static\n")
	odd := write("odd.yaml", "cpuManagerPolicy: dynamic\n")
	tests := []struct {
		name                 string
		args                 []string
		wantDriver, wantCPUs string
		wantLSR              bool
		wantErr              string
	}{
		{name: "no kubelet config: kubelet's defaults", args: []string{"--kubelet-config", filepath.Join(dir, "absent.yaml")}, wantDriver: "cgroupfs", wantCPUs: "none"},
		{name: "from kubelet's file", args: []string{"--kubelet-config", static}, wantDriver: "systemd", wantCPUs: "static", wantLSR: true},
		{name: "file without the keys", args: []string{"--kubelet-config", plain}, wantDriver: "cgroupfs", wantCPUs: "none"},
		{name: "flags beat the file", args: []string{"--kubelet-config", static, "--cpu-manager-policy", "none", "--cgroup-driver", "cgroupfs"}, wantDriver: "cgroupfs", wantCPUs: "none"},
		{name: "flags without a file", args: []string{"--kubelet-config", "", "--cpu-manager-policy", "static"}, wantDriver: "cgroupfs", wantCPUs: "static", wantLSR: true},
		{name: "flags make the file unneeded", args: []string{"--kubelet-config", broken, "--cpu-manager-policy", "static", "--cgroup-driver", "systemd"}, wantDriver: "systemd", wantCPUs: "static", wantLSR: true},
		{name: "a file that does not parse is an error", args: []string{"--kubelet-config", broken}, wantErr: "broken.yaml"},
		{name: "an unknown policy is an error", args: []string{"--kubelet-config", odd}, wantErr: `"dynamic"`},
		{name: "an unknown driver is an error", args: []string{"--kubelet-config", "", "--cgroup-driver", "sysd"}, wantErr: `"sysd"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := load(proxyBinary, tt.args, func(string) string { return "" })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load = %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.cgroupDriver != tt.wantDriver || st.cpuManagerPolicy != tt.wantCPUs || st.policy.QoS.StaticCPUManager != tt.wantLSR {
				t.Fatalf("driver, policy, Guaranteed LSR = %s, %s, %v; want %s, %s, %v",
					st.cgroupDriver, st.cpuManagerPolicy, st.policy.QoS.StaticCPUManager, tt.wantDriver, tt.wantCPUs, tt.wantLSR)
			}
		})
	}
}

// TestRunQueueSwitch: the eBPF run-queue collector is off unless the flag or the config file's key turns
// it on.
func TestRunQueueSwitch(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tandem.yaml")
	if err := os.WriteFile(file, []byte("runQueueLatency: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{name: "off by default", want: false},
		{name: "flag", args: []string{"--run-queue-latency"}, want: true},
		{name: "config file key", args: []string{"--config", file}, want: true},
		{name: "flag beats the file", args: []string{"--config", file, "--run-queue-latency=false"}, want: false},
		{name: "environment", env: map[string]string{"TANDEM_RUN_QUEUE_LATENCY": "true"}, want: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := load(proxyBinary, tt.args, func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if got := collectorConfig(st).RunQueue.Enabled; got != tt.want {
				t.Fatalf("run-queue collector enabled = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestBEParentFollowsTheCgroupDriver: suppression and BE thread scheduling find the BE pods' parent where
// kubelet's cgroup driver puts it.
func TestBEParentFollowsTheCgroupDriver(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args             []string
		want, wantCgRoot string
	}{
		{[]string{"--kubelet-config", ""}, "/kubepods/besteffort", "/"},
		{[]string{"--kubelet-config", "", "--kubelet-cgroup-root", "/k8s"}, "/k8s/kubepods/besteffort", "/k8s"},
		{[]string{"--kubelet-config", "", "--kubelet-cgroup-root", "k8s/"}, "/k8s/kubepods/besteffort", "/k8s"},
		// Host applications' Kubepods bases under systemd need kubelet's cgroup root to stay "/".
		{[]string{"--kubelet-config", "", "--cgroup-driver", "systemd"}, "kubepods-besteffort.slice", "/"},
	} {
		st, err := load(proxyBinary, tt.args, func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		if st.beParent != tt.want || st.kubeletCgroupRoot != tt.wantCgRoot {
			t.Errorf("%v: BE parent %q, kubelet cgroup root %q; want %q, %q", tt.args, st.beParent, st.kubeletCgroupRoot, tt.want, tt.wantCgRoot)
		}
	}
}
