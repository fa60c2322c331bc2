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
	o.ProcRoot = t.TempDir() // no kubelet running
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
	wantRemoved := []Change{
		{want[3].Path, Removed}, {want[2].Path, Removed}, {want[1].Path, Removed}, {want[0].Path, Removed},
		{filepath.Join(o.Prefix, "usr/local/bin/tandem-proxy.previous"), Absent}, // no upgrade happened
	}
	if !slices.Equal(changes, wantRemoved) {
		t.Errorf("uninstall = %+v, want %+v", changes, wantRemoved)
	}
	for _, c := range changes {
		if _, err := os.Stat(c.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there after uninstall: %v", c.Path, err)
		}
	}
	changes, err = Uninstall(o)
	if err != nil || len(changes) != 5 || slices.ContainsFunc(changes, func(c Change) bool { return c.Action != Absent }) {
		t.Errorf("second uninstall = %+v, %v; want five absent files", changes, err)
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

// TestUpgradeRestartsProxyOnly: a new tandem-proxy binary over a running one restarts
// tandem-proxy.service and never kubelet (pods keep running through it), keeps the old binary
// for rollback, and a rollback swaps the two back, again restarting the proxy alone.
func TestUpgradeRestartsProxyOnly(t *testing.T) {
	t.Parallel()
	o := testOptions(t)
	writeTree(t, o.Prefix, debian())
	addKubelet(t, o.ProcRoot, "4242", "kubelet", kubeadmKubelet("--config-dir=/etc/kubernetes/kubelet.conf.d")...)
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	bin, prev := filepath.Join(o.Prefix, BinaryPath), filepath.Join(o.Prefix, PreviousBinaryPath)
	v1, _ := os.ReadFile(o.Binary)
	if _, err := os.Stat(prev); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a first install kept a previous binary: %v", err)
	}
	if _, err := Rollback(o); !errors.Is(err, ErrNoPreviousBinary) || !strings.Contains(err.Error(), prev) {
		t.Errorf("Rollback with nothing to go back to = %v, want ErrNoPreviousBinary naming %s", err, prev)
	}

	v2 := []byte("#!/bin/true\n# v2\n")
	if err := os.WriteFile(o.Binary, v2, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{{prev, Wrote}, {bin, Wrote}}
	for _, p := range o.Paths()[1:] {
		want = append(want, Change{p, Unchanged})
	}
	if !slices.Equal(res.Changes, want) || !res.ProxyChanged || res.KubeletChanged {
		t.Fatalf("install of a new binary = %+v\nwant %+v, the proxy alone changed", res, want)
	}
	if b, _ := os.ReadFile(prev); !bytes.Equal(b, v1) {
		t.Errorf("%s holds %q, want the replaced binary %q", prev, b, v1)
	}
	wantCmds := []string{"systemctl daemon-reload", "systemctl enable --now tandem-proxy.service", "systemctl restart tandem-proxy.service"}
	if ran := startCommands(t, func(run Runner) error { return Start(context.Background(), res, run, func(string) {}) }); !slices.Equal(ran, wantCmds) {
		t.Errorf("upgrade ran %q, want %q (no kubelet restart)", ran, wantCmds)
	}

	// The same binary again keeps the previous one.
	if res, err := Install(o); err != nil || res.ProxyChanged || slices.Contains(res.Changes, Change{prev, Wrote}) {
		t.Errorf("install of the same binary = %+v, %v; want nothing written", res, err)
	}

	for i, wantBin := range [][]byte{v1, v2} {
		res, err := Rollback(o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Changes, []Change{{bin, Wrote}, {prev, Wrote}}) || !res.ProxyChanged || res.KubeletChanged {
			t.Errorf("rollback %d = %+v", i+1, res)
		}
		b, _ := os.ReadFile(bin)
		p, _ := os.ReadFile(prev)
		if !bytes.Equal(b, wantBin) || bytes.Equal(p, wantBin) {
			t.Errorf("after rollback %d the binary holds %q and the previous %q", i+1, b, p)
		}
		if st, err := os.Stat(bin); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("rolled back binary: %v, %v", st, err)
		}
		if ran := startCommands(t, func(run Runner) error { return RestartProxy(context.Background(), run, func(string) {}) }); !slices.Equal(ran, []string{"systemctl restart tandem-proxy.service"}) {
			t.Errorf("rollback ran %q", ran)
		}
	}

	changes, err := Uninstall(o)
	if err != nil || !slices.Contains(changes, Change{prev, Removed}) {
		t.Errorf("Uninstall = %+v, %v; want %s removed", changes, err, prev)
	}
}

// startCommands returns the commands f runs through its Runner.
func startCommands(t *testing.T, f func(Runner) error) []string {
	t.Helper()
	var ran []string
	run := func(_ context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, strings.Join(append([]string{name}, args...), " "))
		return nil, nil
	}
	if err := f(run); err != nil {
		t.Fatal(err)
	}
	return ran
}
