//go:build e2e

package cluster_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/e2e/cluster"
)

// TestKubeadmSchedulerConfig runs the command of docs/install.md's "Keeping it through kubeadm
// upgrades" on the ClusterConfiguration it shows, with kubeadm's --rootfs so that kubeadm writes below
// a directory of the test's, and checks the kube-scheduler manifest kubeadm writes: kube-scheduler
// runs with the shipped --config and mounts it and the extender's certificates read-only. kubeadm
// upgrade writes the manifest from the same ClusterConfiguration with the same code.
func TestKubeadmSchedulerConfig(t *testing.T) {
	ctx := testContext(t, time.Minute)
	doc, err := os.ReadFile(repoPath(t, "docs/install.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	i := strings.Index(section, "### Keeping it through kubeadm upgrades")
	if i < 0 {
		t.Fatal("docs/install.md has no section \"Keeping it through kubeadm upgrades\"")
	}
	section = section[i:]
	if j := strings.Index(section[4:], "\n#"); j >= 0 {
		section = section[:j+4]
	}
	block := func(lang string) string {
		_, rest, ok := strings.Cut(section, "```"+lang+"\n")
		if !ok {
			t.Fatalf("the section has no %s block", lang)
		}
		body, _, _ := strings.Cut(rest, "```")
		return body
	}
	cmd := strings.Fields(strings.TrimSpace(block("sh")))
	if want := []string{"kubeadm", "init", "phase", "control-plane", "scheduler", "--config", "cluster-config.yaml"}; !slices.Equal(cmd, want) {
		t.Fatalf("the section runs %q; this test runs %q: change one or the other", cmd, want)
	}
	root := t.TempDir()
	cfg := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: " + cluster.KubernetesVersion + "\n" + block("yaml")
	if err := os.WriteFile(filepath.Join(root, "cluster-config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// kubeadm chroots into --rootfs first, so the file's path is taken from there.
	kubeadm := filepath.Join(filepath.Dir(suite.c.Kubectl), cluster.Kubeadm)
	out, err := exec.CommandContext(ctx, kubeadm, append(cmd[1:], "--rootfs", root)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s --rootfs %s: %v: %s", strings.Join(cmd, " "), root, err, out)
	}
	b, err := os.ReadFile(filepath.Join(root, "etc/kubernetes/manifests/kube-scheduler.yaml"))
	if err != nil {
		t.Fatalf("kubeadm wrote no kube-scheduler manifest: %v: %s", err, out)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(b, &pod); err != nil {
		t.Fatalf("kube-scheduler manifest: %v", err)
	}
	c := pod.Spec.Containers[0]
	if !slices.Contains(c.Command, "--config=/etc/kubernetes/kube-scheduler-config.yaml") {
		t.Errorf("kube-scheduler runs %q, without --config=/etc/kubernetes/kube-scheduler-config.yaml", c.Command)
	}
	for _, want := range []struct{ name, path string }{
		{"tandem-config", "/etc/kubernetes/kube-scheduler-config.yaml"},
		{"tandem-extender-pki", "/etc/kubernetes/tandem-extender"},
	} {
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == want.name && m.MountPath == want.path && m.ReadOnly
		})
		volume := slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == want.name && v.HostPath != nil && v.HostPath.Path == want.path
		})
		if !mounted || !volume {
			t.Errorf("kube-scheduler manifest: %s at %s mounted read-only %v, host path volume %v; want both", want.name, want.path, mounted, volume)
		}
	}
	// What kube-scheduler reads there is deploy/'s file, which names the extender beside it.
	shipped, err := os.ReadFile(repoPath(t, "deploy/extender/kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(shipped), cluster.ExtenderURL) {
		t.Errorf("deploy/extender/kube-scheduler-config.yaml does not call the extender at %s", cluster.ExtenderURL)
	}
}
