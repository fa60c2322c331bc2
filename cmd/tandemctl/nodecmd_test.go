package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tandemkit/tandem/cmd/tandemctl/internal/node"
)

// TestNodeInstallCommand runs the command as the tier-2 e2e does: into a prefix, every path
// flag given, no systemctl (the prefix is not /).
func TestNodeInstallCommand(t *testing.T) {
	prefix := t.TempDir()
	bin := filepath.Join(t.TempDir(), "tandem-proxy")
	if err := os.WriteFile(bin, []byte("proxy"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"install", "--prefix", prefix, "--binary", bin, "--kubeconfig", "/k/kubelet.conf",
		"--runtime-endpoint", "unix:///k/containerd.sock", "--listen", "/k/tandem.sock", "--kubelet-cgroup-root", "/node-a",
		"--node-name", "node-a", "--state-dir", "/k/state", "--metrics-addr", "127.0.0.1:19316",
		"--kubelet-config-dir", "/etc/kubernetes/kubelet.conf.d"}
	var out, errOut bytes.Buffer
	if err := runNode(context.Background(), args, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"wrote     " + filepath.Join(prefix, "usr/local/bin/tandem-proxy"),
		"wrote     " + filepath.Join(prefix, "etc/systemd/system/tandem-proxy.service"),
		"wrote     " + filepath.Join(prefix, "etc/kubernetes/kubelet.conf.d/50-tandem-runtime.conf"),
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "ran ") || !strings.Contains(out.String(), "not started") || errOut.Len() != 0 {
		t.Errorf("an install into a prefix ran systemctl, warned, or did not say it started nothing:\n%s%s", out.String(), errOut.String())
	}
	unit, err := os.ReadFile(filepath.Join(prefix, "etc/systemd/system/tandem-proxy.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--kubelet-cgroup-root=/node-a", "--node-name=node-a", "--kubeconfig=/k/kubelet.conf"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %s", want)
		}
	}

	out.Reset()
	if err := runNode(context.Background(), []string{"uninstall", "--prefix", prefix, "--kubelet-config-dir", "/etc/kubernetes/kubelet.conf.d"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "removed ") != 4 {
		t.Errorf("uninstall output:\n%s", out.String())
	}

	if err := runNode(context.Background(), []string{"upgrade"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "install, uninstall or rollback") {
		t.Errorf("unknown subcommand: %v", err)
	}
}

// kubeadmNode is a Debian kubeadm node's kubelet files, as the pkgs.k8s.io packages and
// kubeadm join leave them.
var kubeadmNode = map[string]string{
	"usr/lib/systemd/system/kubelet.service": "[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n",
	"usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": `[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`,
	"var/lib/kubelet/kubeadm-flags.env": `KUBELET_KUBEADM_ARGS="--pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n",
	"etc/default/kubelet":               "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.2\n",
}

// fakeNode is a node below a temporary prefix, with a fake /proc holding its kubelet and a
// systemctl that records what it is asked.
type fakeNode struct {
	prefix, proc, bin string
	ran               []string
}

func newFakeNode(t *testing.T, tree map[string]string) *fakeNode {
	t.Helper()
	n := &fakeNode{prefix: t.TempDir(), proc: t.TempDir(), bin: filepath.Join(t.TempDir(), "tandem-proxy")}
	for p, data := range tree {
		p = filepath.Join(n.prefix, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(n.proc, "812"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.proc, "812", "comm"), []byte("kubelet\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.proc, "812", "cmdline"), []byte("/usr/bin/kubelet\x00--config=/var/lib/kubelet/config.yaml\x00--node-ip=10.0.0.2\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.setBinary(t, "v1")
	return n
}

func (n *fakeNode) setBinary(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(n.bin, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs tandemctl node with args, --start and the node's paths, and returns what it printed
// and the commands it ran.
func (n *fakeNode) run(t *testing.T, args ...string) (stdout, stderr string, ran []string, err error) {
	t.Helper()
	n.ran = nil
	c := nodeCmd{procRoot: n.proc, run: func(_ context.Context, name string, args ...string) ([]byte, error) {
		n.ran = append(n.ran, strings.Join(append([]string{name}, args...), " "))
		return nil, nil
	}}
	var out, errOut bytes.Buffer
	err = c.main(context.Background(), append(args, "--prefix", n.prefix, "--binary", n.bin, "--start"), &out, &errOut)
	return out.String(), errOut.String(), n.ran, err
}

// TestNodeLifeCycle runs install, upgrade, rollback and uninstall on a kubeadm node as an
// operator would, with systemctl recorded.
func TestNodeLifeCycle(t *testing.T) {
	n := newFakeNode(t, kubeadmNode)
	envFile := filepath.Join(n.prefix, "etc/default/kubelet")

	out, errOut, ran, err := n.run(t, "install")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"wrote     " + filepath.Join(n.prefix, "etc/kubernetes/kubelet.conf.d/50-tandem-runtime.conf") + "\nwrote     " + envFile + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("install output lacks %q:\n%s", want, out)
		}
	}
	wantRan := []string{"systemctl daemon-reload", "systemctl enable --now tandem-proxy.service", "systemctl restart tandem-proxy.service", "systemctl restart kubelet.service"}
	if !slices.Equal(ran, wantRan) || errOut != "" {
		t.Errorf("install ran %q (warned %q), want %q", ran, errOut, wantRan)
	}
	if b, _ := os.ReadFile(envFile); !strings.HasSuffix(string(b), "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.2 --config-dir=/etc/kubernetes/kubelet.conf.d\n") {
		t.Errorf("%s:\n%s", envFile, b)
	}

	// kubelet restarted with the flag: a second install changes nothing and restarts nothing.
	if err := os.WriteFile(filepath.Join(n.proc, "812", "cmdline"), []byte("/usr/bin/kubelet\x00--node-ip=10.0.0.2\x00--config-dir=/etc/kubernetes/kubelet.conf.d\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, ran, err = n.run(t, "install")
	if err != nil || strings.Contains(out, "wrote") || !strings.Contains(out, "unchanged "+envFile) || len(ran) != 2 {
		t.Errorf("second install = %v, ran %q:\n%s", err, ran, out)
	}

	// An upgrade: tandem-proxy alone restarts.
	n.setBinary(t, "v2")
	out, _, ran, err = n.run(t, "install")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"systemctl daemon-reload", "systemctl enable --now tandem-proxy.service", "systemctl restart tandem-proxy.service"}; !slices.Equal(ran, want) {
		t.Errorf("upgrade ran %q, want %q", ran, want)
	}
	if !strings.Contains(out, "wrote     "+filepath.Join(n.prefix, node.PreviousBinaryPath)+"\n") {
		t.Errorf("upgrade output:\n%s", out)
	}

	out, _, ran, err = n.run(t, "rollback")
	if err != nil || !slices.Equal(ran, []string{"systemctl restart tandem-proxy.service"}) {
		t.Errorf("rollback = %v, ran %q:\n%s", err, ran, out)
	}
	if b, _ := os.ReadFile(filepath.Join(n.prefix, node.BinaryPath)); string(b) != "v1" {
		t.Errorf("rolled back to %q, want v1", b)
	}

	out, _, ran, err = n.run(t, "uninstall")
	if err != nil || !slices.Equal(ran, []string{"systemctl daemon-reload", "systemctl restart kubelet.service", "systemctl disable --now tandem-proxy.service"}) {
		t.Errorf("uninstall = %v, ran %q:\n%s", err, ran, out)
	}
	if b, _ := os.ReadFile(envFile); string(b) != kubeadmNode["etc/default/kubelet"] {
		t.Errorf("after uninstall %s holds %q, want it as it was", envFile, b)
	}
	for _, p := range []string{node.BinaryPath, node.PreviousBinaryPath} {
		if !strings.Contains(out, "removed   "+filepath.Join(n.prefix, p)+"\n") {
			t.Errorf("uninstall did not remove %s:\n%s", p, out)
		}
	}

	_, _, ran, err = n.run(t, "rollback")
	if !errors.Is(err, node.ErrNoPreviousBinary) || len(ran) != 0 {
		t.Errorf("rollback after uninstall = %v, ran %q", err, ran)
	}
}

// TestNodeInstallRefusesBypass: a kubelet flag naming containerd stops the install before it
// writes or runs anything.
func TestNodeInstallRefusesBypass(t *testing.T) {
	tree := map[string]string{}
	for p, data := range kubeadmNode {
		tree[p] = data
	}
	tree["var/lib/kubelet/kubeadm-flags.env"] = `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock"` + "\n"
	n := newFakeNode(t, tree)
	out, _, ran, err := n.run(t, "install")
	if !errors.Is(err, node.ErrKubeletFlagBypass) || out != "" || len(ran) != 0 {
		t.Fatalf("install = %v, ran %q:\n%s", err, ran, out)
	}
	if _, err := os.Stat(filepath.Join(n.prefix, node.BinaryPath)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused install wrote the binary: %v", err)
	}
	// Uninstall still works.
	if _, _, _, err := n.run(t, "uninstall"); err != nil {
		t.Errorf("uninstall = %v", err)
	}
}

// recordingPatcher records the Nodes patched, or fails.
type recordingPatcher struct {
	nodes []string
	err   error
}

func (r *recordingPatcher) PatchNode(_ context.Context, name string, _ types.PatchType, _ []byte, _ ...string) error {
	r.nodes = append(r.nodes, name)
	return r.err
}

// TestUninstallWithdraws: after the proxy stopped, uninstall takes the agent's publications off the
// node's own Node with the --kubeconfig credentials; when the API refuses, the node is uninstalled
// all the same and a warning says what stays.
func TestUninstallWithdraws(t *testing.T) {
	for _, tt := range []struct {
		name     string
		err      error
		wantOut  string
		wantWarn string
	}{
		{name: "withdrawn", wantOut: "withdrew kubernetes.io/batch-cpu, kubernetes.io/batch-memory and tandem.io/node-metric from Node node-1\n"},
		{name: "API refuses", err: errors.New("forbidden"), wantWarn: "warning: batch capacity and the tandem.io/node-metric annotation stay on the Node"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode(t, kubeadmNode)
			if _, _, _, err := n.run(t, "install"); err != nil {
				t.Fatal(err)
			}
			rec := &recordingPatcher{err: tt.err}
			var gotConfig string
			c := nodeCmd{procRoot: n.proc, run: func(context.Context, string, ...string) ([]byte, error) { return nil, nil },
				patcher: func(kubeconfig string) (node.NodePatcher, error) { gotConfig = kubeconfig; return rec, nil }}
			var out, errOut bytes.Buffer
			err := c.main(context.Background(), []string{"uninstall", "--prefix", n.prefix, "--start", "--node-name", "node-1"}, &out, &errOut)
			if err != nil {
				t.Fatalf("uninstall: %v", err)
			}
			if gotConfig != node.DefaultKubeletConf || len(rec.nodes) == 0 || slices.ContainsFunc(rec.nodes, func(n string) bool { return n != "node-1" }) {
				t.Errorf("patched %q with %s, want node-1 with %s", rec.nodes, gotConfig, node.DefaultKubeletConf)
			}
			if !strings.Contains(out.String(), tt.wantOut) || !strings.Contains(errOut.String(), tt.wantWarn) {
				t.Errorf("printed %q, warned %q; want %q and %q", out.String(), errOut.String(), tt.wantOut, tt.wantWarn)
			}
		})
	}
}
