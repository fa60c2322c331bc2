package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
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

	if err := runNode(context.Background(), []string{"upgrade"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "install or uninstall") {
		t.Errorf("unknown subcommand: %v", err)
	}
}
