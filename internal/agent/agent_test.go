package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/frontend"
)

func TestLoadPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tandem.yaml")
	if err := os.WriteFile(file, []byte("stateDir: /from/file\nlisten: /from/file.sock\nshutdownTimeout: 3s\nsocketMode: \"0600\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		wantState string
		wantSock  string
		wantErr   string
	}{
		{name: "defaults", wantState: "/var/lib/tandem", wantSock: "/var/run/tandem/tandem.sock"},
		{name: "file", args: []string{"--config", file}, wantState: "/from/file", wantSock: "/from/file.sock"},
		{name: "env beats file", args: []string{"--config", file}, env: map[string]string{"TANDEM_STATE_DIR": "/from/env"}, wantState: "/from/env", wantSock: "/from/file.sock"},
		{name: "flag beats env", args: []string{"--config", file, "--state-dir", "/from/flag"}, env: map[string]string{"TANDEM_STATE_DIR": "/from/env"}, wantState: "/from/flag", wantSock: "/from/file.sock"},
		{name: "config file from env", env: map[string]string{"TANDEM_CONFIG": file}, wantState: "/from/file", wantSock: "/from/file.sock"},
		{name: "invalid value names the flag", args: []string{"--runtime-endpoint", "tcp://10.0.0.1:1"}, wantErr: "runtime-endpoint"},
		{name: "bad socket mode", args: []string{"--socket-mode", "rw"}, wantErr: "socket-mode"},
		{name: "unknown policy", args: []string{"--policies", "qos,turbo"}, wantErr: "turbo"},
		{name: "negative heap release interval", args: []string{"--heap-release-interval=-1s"}, wantErr: "heap-release-interval"},
		{name: "missing file", args: []string{"--config", filepath.Join(dir, "nope.yaml")}, wantErr: "nope.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := load(proxyBinary, tt.args, func(k string) string { return tt.env[k] }, t.TempDir())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load = %v, want an error naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.proxy.StateDir != tt.wantState || got.proxy.Listen != tt.wantSock {
				t.Fatalf("stateDir, listen = %q, %q; want %q, %q", got.proxy.StateDir, got.proxy.Listen, tt.wantState, tt.wantSock)
			}
		})
	}
	got, err := load(proxyBinary, []string{"--config", file}, func(string) string { return "" }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got.proxy.ShutdownTimeout != 3*time.Second || got.proxy.SocketMode != 0o600 {
		t.Fatalf("durations and modes from the file: %v %#o", got.proxy.ShutdownTimeout, got.proxy.SocketMode)
	}
}

// TestDebugSocketDefault: the debug socket goes beside the checkpoint unless set, so that two proxies
// on one machine (each with a state dir of its own) never share one.
func TestDebugSocketDefault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{want: "/var/lib/tandem/debug.sock"},
		{args: []string{"--state-dir", "/n/a/state"}, want: "/n/a/state/debug.sock"},
		{args: []string{"--state-dir", "/n/a/state", "--debug-socket", "/run/tandem/debug/proxy.sock"}, want: "/run/tandem/debug/proxy.sock"},
	}
	for _, tt := range tests {
		got, err := load(proxyBinary, tt.args, func(string) string { return "" }, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got.debugSocket != tt.want {
			t.Errorf("load(%q).debugSocket = %q, want %q", tt.args, got.debugSocket, tt.want)
		}
	}
}

// proxyBinary is how cmd/tandem-proxy runs the agent.
var proxyBinary = Binary{Name: "tandem-proxy"}

// nriBinary is how cmd/tandem-nri runs the agent; its front end is not built by these tests.
var nriBinary = Binary{Name: "tandem-nri", NRI: func(NRIOptions, frontend.Deps) (Plugin, error) { return nil, nil }}

// TestLoadNRI: tandem-nri's own flags resolve like every other (flag over TANDEM_* over file over
// default), and tandem-proxy has none of them.
func TestLoadNRI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tandem.yaml")
	if err := os.WriteFile(file, []byte("nriSocket: /from/file.sock\nnriRequestTimeout: 3s\nlisten: /ignored.sock\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want NRIOptions
	}{
		{name: "defaults", want: NRIOptions{Socket: "/var/run/nri/nri.sock", Index: "40", RequestTimeout: 2 * time.Second}},
		{name: "file", args: []string{"--config", file}, want: NRIOptions{Socket: "/from/file.sock", Index: "40", RequestTimeout: 3 * time.Second}},
		{name: "env beats file", args: []string{"--config", file}, env: map[string]string{"TANDEM_NRI_SOCKET": "/from/env.sock", "TANDEM_NRI_PLUGIN_INDEX": "10"},
			want: NRIOptions{Socket: "/from/env.sock", Index: "10", RequestTimeout: 3 * time.Second}},
		{name: "flag beats env", args: []string{"--nri-socket", "/from/flag.sock", "--nri-request-timeout", "5s"}, env: map[string]string{"TANDEM_NRI_SOCKET": "/from/env.sock"},
			want: NRIOptions{Socket: "/from/flag.sock", Index: "40", RequestTimeout: 5 * time.Second}},
		// One config file serves both binaries: the CRI socket's flags are accepted and ignored.
		{name: "proxy flags accepted", args: []string{"--listen", "/x.sock", "--socket-mode", "0600"}, want: NRIOptions{Socket: "/var/run/nri/nri.sock", Index: "40", RequestTimeout: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := load(nriBinary, tt.args, func(k string) string { return tt.env[k] }, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if got.nri != tt.want {
				t.Fatalf("nri options = %+v, want %+v", got.nri, tt.want)
			}
		})
	}
	if _, err := load(proxyBinary, []string{"--nri-socket", "/x.sock"}, func(string) string { return "" }, t.TempDir()); err == nil || !strings.Contains(err.Error(), "nri-socket") {
		t.Fatalf("tandem-proxy with --nri-socket: err = %v, want an unknown flag", err)
	}
}

// TestConfigFileKeys: every flag's key is read from the config file, in the flag's own syntax; a
// misspelt key is refused by name; tandem-proxy accepts the keys only tandem-nri reads, so one file
// serves both.
func TestConfigFileKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(content string) string {
		f, err := os.CreateTemp(dir, "*.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(content); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		return f.Name()
	}
	all := write(`listen: /l.sock
runtimeEndpoint: unix:///r.sock
imageEndpoint: unix:///i.sock
stateDir: /s
metricsAddr: ""
debugSocket: /d.sock
socketMode: "0600"
socketOwner: "0:0"
maxMsgSize: 33554432
maxPodMetadataBytes: 100000
maxHookAnswerBytes: 50000
maxInflightBytes: 67108864
shutdownTimeout: 4s
resyncPeriod: 2m
runtimeTimeout: 7s
hooksDir: /h
cgroupRoot: /c
policies: [qos, cpuset]
sysfsRoot: /sys2
reservedCPUs: 0-1
sloConfig: /slo.yaml
sloConfigMap: ns/name
kubeletCgroupRoot: /kroot
nodeLabels: {zone: a, pool: "b,c"}
kubeconfig: /k.conf
nodeName: n1
podSpecWait: 3s
kubeletConfig: /nonexistent/kubelet.yaml
cgroupDriver: systemd
cpuManagerPolicy: static
runQueueLatency: true
runQueueInterval: 3s
heapReleaseInterval: 30s
nriSocket: /nri.sock
nriPluginIndex: "10"
nriRequestTimeout: 1s
`)
	got, err := load(proxyBinary, []string{"--config", all}, func(string) string { return "" }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := got.proxy
	checks := []struct {
		key       string
		got, want any
	}{
		{"listen", p.Listen, "/l.sock"},
		{"runtimeEndpoint", p.RuntimeEndpoint, "unix:///r.sock"},
		{"imageEndpoint", p.ImageEndpoint, "unix:///i.sock"},
		{"stateDir", p.StateDir, "/s"},
		{"metricsAddr", got.metricsAddr, ""},
		{"debugSocket", got.debugSocket, "/d.sock"},
		{"socketMode", p.SocketMode, uint32(0o600)},
		{"socketOwner", p.SocketOwner, "0:0"},
		{"maxMsgSize", p.MaxMsgSize, 33554432},
		{"maxPodMetadataBytes", p.MaxPodMetadataBytes, 100000},
		{"maxHookAnswerBytes", got.hookLimits.MaxAnswerBytes, 50000},
		{"maxInflightBytes", p.MaxInflightBytes, int64(67108864)},
		{"shutdownTimeout", p.ShutdownTimeout, 4 * time.Second},
		{"resyncPeriod", p.ResyncPeriod, 2 * time.Minute},
		{"runtimeTimeout", p.RuntimeTimeout, 7 * time.Second},
		{"hooksDir", got.hooksDir, "/h"},
		{"cgroupRoot", got.cgroupRoot, "/c"},
		{"policies", strings.Join(got.policy.Enabled, ","), "qos,cpuset"},
		{"sysfsRoot", got.sysfsRoot, "/sys2"},
		{"reservedCPUs", got.cpus.Reserved.String(), "0-1"},
		{"sloConfig", got.sloConfig, "/slo.yaml"},
		{"sloConfigMap", got.sloConfigMap, "ns/name"},
		{"kubeletCgroupRoot", got.kubeletCgroupRoot, "/kroot"},
		{"nodeLabels", got.nodeLabels["pool"] + "|" + got.nodeLabels["zone"], "b,c|a"},
		{"kubeconfig", got.podSpec.Kubeconfig, "/k.conf"},
		{"nodeName", got.podSpec.NodeName, "n1"},
		{"podSpecWait", got.podSpec.Wait, 3 * time.Second},
		{"kubeletConfig", got.kubeletConfig, "/nonexistent/kubelet.yaml"},
		{"cgroupDriver", got.kubelet.cgroupDriver, "systemd"},
		{"cpuManagerPolicy", got.kubelet.cpuManagerPolicy, "static"},
		{"runQueueLatency", got.runQueue, true},
		{"runQueueInterval", got.runQueueInterval, 3 * time.Second},
		{"heapReleaseInterval", got.heapRelease, 30 * time.Second},
	}
	if len(checks) != len(options()) {
		t.Fatalf("%d keys checked, %d options: check every key", len(checks), len(options()))
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.key, c.got, c.want)
		}
	}
	nri, err := load(nriBinary, []string{"--config", all}, func(string) string { return "" }, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if want := (NRIOptions{Socket: "/nri.sock", Index: "10", RequestTimeout: time.Second}); nri.nri != want {
		t.Errorf("tandem-nri options = %+v, want %+v", nri.nri, want)
	}
	// A list from the environment takes the flag's syntax.
	env, err := load(proxyBinary, nil, func(k string) string { return map[string]string{"TANDEM_POLICIES": "qos,cpuset"}[k] }, t.TempDir())
	if err != nil {
		t.Fatalf("TANDEM_POLICIES=qos,cpuset: %v", err)
	}
	if got := strings.Join(env.policy.Enabled, ","); got != "qos,cpuset" {
		t.Errorf("TANDEM_POLICIES=qos,cpuset: policies %q", got)
	}
	for _, bad := range []struct{ content, want string }{
		{"stateDirectory: /s\n", "unknown keys statedirectory"},
		{"maxMsgSize: lots\n", "maxMsgSize"},
		{"listen: /l.sock\nmaxMsgSize: lots\n", ".yaml:2: key maxMsgSize"},
		{"policies: qos,turbo\n", "turbo"},
		{"nodeLabels: [a]\n", "nodeLabels"},
	} {
		if _, err := load(proxyBinary, []string{"--config", write(bad.content)}, func(string) string { return "" }, t.TempDir()); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("config %q: err = %v, want one naming %q", bad.content, err, bad.want)
		}
	}
}

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name      string
		binary    Binary
		env       map[string]string
		want      int
		wantApply bool
	}{
		{name: "binary's target when GOGC is unset", binary: Binary{GCPercent: 200}, want: 200, wantApply: true},
		{name: "the operator's GOGC wins", binary: Binary{GCPercent: 200}, env: map[string]string{"GOGC": "100"}},
		{name: "GOGC=off wins too", binary: Binary{GCPercent: 200}, env: map[string]string{"GOGC": "off"}},
		{name: "an empty GOGC is still the operator's", binary: Binary{GCPercent: 200}, env: map[string]string{"GOGC": ""}},
		{name: "no target keeps Go's default", binary: Binary{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			got, apply := gcPercent(tc.binary, lookup)
			if got != tc.want || apply != tc.wantApply {
				t.Errorf("gcPercent = %d, %t; want %d, %t", got, apply, tc.want, tc.wantApply)
			}
		})
	}
}

func TestGodebugSets(t *testing.T) {
	for _, tc := range []struct {
		godebug string
		want    bool
	}{
		{"", false},
		{"memprofilerate=524288", true},
		{"gctrace=1,memprofilerate=1", true},
		{"gctrace=1, memprofilerate=0", true},
		{"memprofilerates=1", false},
		{"gctrace=1", false},
		{"xmemprofilerate=1", false},
	} {
		if got := godebugSets(tc.godebug, "memprofilerate"); got != tc.want {
			t.Errorf("godebugSets(%q, memprofilerate) = %t, want %t", tc.godebug, got, tc.want)
		}
	}
}
