package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/deploy"
)

// execStart reads a unit's ExecStart the way systemd splits an unquoted one (and the way
// e2e/cluster's ExecStart does): backslash continuations joined, words split on blanks.
func execStart(t *testing.T, unit []byte) []string {
	t.Helper()
	var line strings.Builder
	in := false
	for _, l := range strings.Split(string(unit), "\n") {
		l = strings.TrimSpace(l)
		if !in {
			rest, ok := strings.CutPrefix(l, "ExecStart=")
			if !ok {
				continue
			}
			in, l = true, rest
		}
		line.WriteString(strings.TrimSuffix(l, `\`) + " ")
		if !strings.HasSuffix(l, `\`) {
			break
		}
	}
	return strings.Fields(line.String())
}

func testOptions(t *testing.T) Options {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tandem-proxy")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.Prefix = t.TempDir()
	o.Binary = bin
	return o
}

func TestInstall(t *testing.T) {
	t.Parallel()
	o := testOptions(t)
	o.Kubeconfig = "/n/a/kubelet.kubeconfig"
	o.RuntimeEndpoint = "unix:///n/a/containerd.sock"
	o.Listen = "/n/a/tandem.sock"
	o.KubeletCgroupRoot = "/node-a"
	o.NodeName = "node-a"
	o.StateDir = "/n/a/state"
	o.MetricsAddr = "127.0.0.1:19316"
	o.HooksDir = "/n/a/hooks.d"
	o.KubeletConfigDir = "/etc/kubelet.d"
	o.ProxyArgs = []string{"--reserved-cpus=0", "-v=4"}

	res, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{filepath.Join(o.Prefix, "usr/local/bin/tandem-proxy"), Wrote},
		{filepath.Join(o.Prefix, "etc/systemd/system/tandem-proxy.service"), Wrote},
		{filepath.Join(o.Prefix, "etc/systemd/system/kubelet.service.d/10-tandem-proxy.conf"), Wrote},
		{filepath.Join(o.Prefix, "etc/kubelet.d/50-tandem-runtime.conf"), Wrote},
	}
	if !slices.Equal(res.Changes, want) || !res.ProxyChanged || !res.KubeletChanged {
		t.Fatalf("Install = %+v, want %+v with both changed", res, want)
	}
	for path, mode := range map[string]fs.FileMode{want[0].Path: 0o755, want[1].Path: 0o644, want[2].Path: 0o644, want[3].Path: 0o644} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s has mode %v, want %v", path, st.Mode().Perm(), mode)
		}
	}
	if b, _ := os.ReadFile(want[0].Path); string(b) != "#!/bin/true\n" {
		t.Errorf("installed binary holds %q, not --binary's content", b)
	}

	unit, err := os.ReadFile(want[1].Path)
	if err != nil {
		t.Fatal(err)
	}
	got := execStart(t, unit)
	wantExec := []string{
		want[0].Path, // the binary where it was written, so the unit runs as written
		"--listen=/n/a/tandem.sock",
		"--runtime-endpoint=unix:///n/a/containerd.sock",
		"--kubeconfig=/n/a/kubelet.kubeconfig",
		"--kubelet-cgroup-root=/node-a",
		"--state-dir=/n/a/state",
		"--metrics-addr=127.0.0.1:19316",
		"--hooks-dir=/n/a/hooks.d",
		"--cgroup-root=/sys/fs/cgroup",
		"-v=4",
		"--node-name=node-a",
		"--reserved-cpus=0",
	}
	if !slices.Equal(got, wantExec) {
		t.Errorf("ExecStart\n got %q\nwant %q", got, wantExec)
	}
	// Everything but ExecStart is deploy/'s unit.
	tmpl, _ := fs.ReadFile(deploy.NodeFiles(), deploy.ProxyUnit)
	for _, l := range []string{"Restart=always", "OOMScoreAdjust=-999", "WantedBy=multi-user.target kubelet.service", "Before=kubelet.service"} {
		if !bytes.Contains(tmpl, []byte(l)) || !bytes.Contains(unit, []byte(l)) {
			t.Errorf("installed unit lacks %q of deploy/'s", l)
		}
	}

	drop, _ := os.ReadFile(want[2].Path)
	if shipped, _ := fs.ReadFile(deploy.NodeFiles(), deploy.KubeletUnitDropIn); !bytes.Equal(drop, shipped) {
		t.Errorf("kubelet systemd drop-in differs from deploy/'s")
	}
	kc, _ := os.ReadFile(want[3].Path)
	var cfg struct {
		APIVersion               string `json:"apiVersion"`
		Kind                     string `json:"kind"`
		ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
		ImageServiceEndpoint     string `json:"imageServiceEndpoint"`
	}
	if err := yaml.UnmarshalStrict(kc, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.ContainerRuntimeEndpoint != "unix:///n/a/tandem.sock" || cfg.ImageServiceEndpoint != "unix:///n/a/tandem.sock" {
		t.Errorf("kubelet pointed at %q / %q, want the proxy's --listen", cfg.ContainerRuntimeEndpoint, cfg.ImageServiceEndpoint)
	}

	// Again: nothing to do.
	res, err = Install(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Changes {
		if c.Action != Unchanged {
			t.Errorf("second install: %s %s, want unchanged", c.Action, c.Path)
		}
	}
	if res.ProxyChanged || res.KubeletChanged {
		t.Errorf("second install reports changes: %+v", res)
	}

	// A changed flag rewrites the unit only: tandem-proxy restarts, kubelet does not.
	o.MetricsAddr = "127.0.0.1:29316"
	res, err = Install(o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.ProxyChanged || res.KubeletChanged || res.Changes[1].Action != Wrote || res.Changes[0].Action != Unchanged {
		t.Errorf("install with a new --metrics-addr: %+v, want only the unit written", res)
	}

	changes, err := Uninstall(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if c.Action != Removed {
			t.Errorf("uninstall: %s %s, want removed", c.Action, c.Path)
		}
		if _, err := os.Stat(c.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there after uninstall: %v", c.Path, err)
		}
	}
	changes, err = Uninstall(o)
	if err != nil || len(changes) != 4 || changes[0].Action != Absent {
		t.Errorf("second uninstall = %+v, %v; want four absent files", changes, err)
	}
}

func TestUnitDefaults(t *testing.T) {
	t.Parallel()
	tmpl, err := fs.ReadFile(deploy.NodeFiles(), deploy.ProxyUnit)
	if err != nil {
		t.Fatal(err)
	}
	unit, err := Unit(tmpl, "/usr/local/bin/tandem-proxy", DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	// The defaults are what deploy/ ships: the unit is rewritten into itself.
	if !bytes.Equal(unit, tmpl) {
		t.Errorf("default options change deploy/'s unit:\n%s", unit)
	}
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"space in a value", func(o *Options) { o.StateDir = "/var/lib/my tandem" }, "cannot stand"},
		{"systemd specifier", func(o *Options) { o.NodeName = "node-%H" }, "cannot stand"},
		{"variable", func(o *Options) { o.ProxyArgs = []string{"--node-labels=$LABELS"} }, "cannot stand"},
		{"argument without value", func(o *Options) { o.ProxyArgs = []string{"--reserved-cpus"} }, "--flag=value"},
		{"relative prefix", func(o *Options) { o.Prefix = "node" }, "absolute"},
		{"relative listen", func(o *Options) { o.Listen = "tandem.sock" }, "absolute"},
		{"no binary", func(o *Options) { o.Binary = "/nonexistent/tandem-proxy" }, "--binary"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(t)
			tc.change(&o)
			_, err := Install(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Install = %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(o.Prefix, UnitPath)); err == nil {
				t.Error("a refused install wrote the unit")
			}
		})
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		res  Result
		want []string
	}{
		{"nothing changed", Result{}, []string{"systemctl daemon-reload", "systemctl enable --now tandem-proxy.service"}},
		{"proxy changed", Result{ProxyChanged: true}, []string{"systemctl daemon-reload", "systemctl enable --now tandem-proxy.service", "systemctl restart tandem-proxy.service"}},
		{"all changed", Result{ProxyChanged: true, KubeletChanged: true}, []string{"systemctl daemon-reload", "systemctl enable --now tandem-proxy.service", "systemctl restart tandem-proxy.service", "systemctl restart kubelet.service"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ran, reported []string
			run := func(_ context.Context, name string, args ...string) ([]byte, error) {
				ran = append(ran, strings.Join(append([]string{name}, args...), " "))
				return nil, nil
			}
			if err := Start(context.Background(), tc.res, run, func(c string) { reported = append(reported, c) }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ran, tc.want) || !slices.Equal(reported, tc.want) {
				t.Errorf("ran %q, reported %q, want %q", ran, reported, tc.want)
			}
		})
	}
	// A failing command stops the sequence and says which one and why.
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		return []byte("Unit kubelet.service not found.\n"), errors.New("exit status 5")
	}
	err := Start(context.Background(), Result{}, run, func(string) {})
	if err == nil || !strings.Contains(err.Error(), "systemctl daemon-reload") || !strings.Contains(err.Error(), "not found") {
		t.Errorf("Start with a failing systemctl = %v", err)
	}
}

func TestKubeletConfigDirWarning(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	add := func(pid, comm string, args ...string) {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644)
	}
	add("10", "kubelet", "/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d/")
	add("11", "kubelet", "/usr/bin/kubelet", "--config-dir", "/etc/kubernetes/kubelet.conf.d")
	add("12", "containerd", "/usr/bin/containerd", "--config-dir=/elsewhere")
	if w := KubeletConfigDirWarning(proc, "/etc/kubernetes/kubelet.conf.d"); len(w) != 0 {
		t.Errorf("kubelets reading the directory warned about: %q", w)
	}
	add("13", "kubelet", "/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml")
	add("14", "kubelet", "/usr/bin/kubelet", "--config-dir=/etc/other")
	w := KubeletConfigDirWarning(proc, "/etc/kubernetes/kubelet.conf.d")
	if len(w) != 2 || !strings.Contains(w[0], "pid 13") || !strings.Contains(w[0], "without --config-dir") ||
		!strings.Contains(w[1], "pid 14") || !strings.Contains(w[1], "--config-dir=/etc/other") {
		t.Errorf("warnings %q, want one for pid 13 (no flag) and one for pid 14 (another directory)", w)
	}
}
