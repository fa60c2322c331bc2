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

// docSection is the part of the document at path (from the repository root) under heading, up to
// the next heading.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	doc, err := os.ReadFile(repoPath(t, path))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", path, heading)
	}
	if j := strings.Index(section, "\n#"); j >= 0 {
		section = section[:j]
	}
	return section
}

// codeBlocks is every fenced block of lang in section, in order; it fails the test when none.
func codeBlocks(t *testing.T, section, lang string) []string {
	t.Helper()
	var out []string
	for {
		_, rest, ok := strings.Cut(section, "```"+lang+"\n")
		if !ok {
			break
		}
		var body string
		body, section, _ = strings.Cut(rest, "```")
		out = append(out, body)
	}
	if len(out) == 0 {
		t.Fatalf("the section has no %s block", lang)
	}
	return out
}

// TestKubeadmSchedulerConfig runs the command of docs/install.md's "Keeping it through kubeadm
// upgrades" on the ClusterConfiguration it shows, with kubeadm's --rootfs so that kubeadm writes below
// a directory of the test's, and checks the kube-scheduler manifest kubeadm writes: kube-scheduler
// runs with the shipped --config and mounts it and the extender's certificates read-only. kubeadm
// upgrade writes the manifest from the same ClusterConfiguration with the same code.
func TestKubeadmSchedulerConfig(t *testing.T) {
	ctx := testContext(t, time.Minute)
	section := docSection(t, "docs/install.md", "### Keeping it through kubeadm upgrades")
	block := func(lang string) string { return codeBlocks(t, section, lang)[0] }
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

// TestKubeadmSchedulerPlugin runs the command of docs/scheduler-plugin.md's "Keeping it through
// kubeadm upgrades" on the patch and the kubeadm configuration it shows, with kubeadm's --rootfs,
// and checks the manifest kubeadm writes: tandem-scheduler's image and binary with the shipped
// --config mounted read-only, and kubeadm's own flags kept. kubeadm upgrade applies the same
// patches directory with the same code.
func TestKubeadmSchedulerPlugin(t *testing.T) {
	ctx := testContext(t, time.Minute)
	section := docSection(t, "docs/scheduler-plugin.md", "### Keeping it through kubeadm upgrades")
	yamls := codeBlocks(t, section, "yaml")
	if len(yamls) != 2 {
		t.Fatalf("the section has %d yaml blocks; this test expects the patch, then the kubeadm configuration", len(yamls))
	}
	cmd := strings.Fields(strings.TrimSpace(codeBlocks(t, section, "sh")[0]))
	if want := []string{"kubeadm", "init", "phase", "control-plane", "scheduler", "--config", "kubeadm-config.yaml"}; !slices.Equal(cmd, want) {
		t.Fatalf("the section runs %q; this test runs %q: change one or the other", cmd, want)
	}
	root := t.TempDir()
	patches := filepath.Join(root, "etc/kubernetes/patches")
	if err := os.MkdirAll(patches, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(patches, "kube-scheduler+strategic.yaml"), []byte(yamls[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	// The document leaves kubernetesVersion to the cluster's; kubeadm without network needs it.
	cfg := strings.Replace(yamls[1], "kind: ClusterConfiguration\n", "kind: ClusterConfiguration\nkubernetesVersion: "+cluster.KubernetesVersion+"\n", 1)
	if err := os.WriteFile(filepath.Join(root, "kubeadm-config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	kubeadm := filepath.Join(filepath.Dir(suite.c.Kubectl), cluster.Kubeadm)
	out, err := exec.CommandContext(ctx, kubeadm, append(cmd[1:], "--rootfs", root)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s --rootfs %s: %v: %s", strings.Join(cmd, " "), root, err, out)
	}
	if !strings.Contains(string(out), "Applied patch") {
		t.Errorf("kubeadm applied no patch: %s", out)
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
	if c.Image != "ghcr.io/tandemkit/tandem-scheduler:v0.1.0" || len(c.Command) == 0 || c.Command[0] != "/tandem-scheduler" {
		t.Errorf("kube-scheduler manifest runs %q from %s; want /tandem-scheduler from the image make images builds", c.Command, c.Image)
	}
	for _, flag := range []string{"--config=/etc/kubernetes/kube-scheduler-config.yaml", "--kubeconfig=/etc/kubernetes/scheduler.conf", "--leader-elect=true"} {
		if !slices.Contains(c.Command, flag) {
			t.Errorf("tandem-scheduler runs %q, without %s", c.Command, flag)
		}
	}
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "tandem-config" && m.MountPath == "/etc/kubernetes/kube-scheduler-config.yaml" && m.ReadOnly
	})
	if !mounted {
		t.Errorf("the shipped configuration is not mounted read-only: %+v", c.VolumeMounts)
	}
	// The image is Makefile's: IMAGE_REPO/tandem-scheduler:VERSION.
	mk, err := os.ReadFile(repoPath(t, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "IMAGE_REPO ?= ghcr.io/tandemkit") || !strings.Contains(string(mk), "VERSION  ?= v0.1.0") || !strings.Contains(string(mk), "tandem-scheduler:$(VERSION)") {
		t.Error("the Makefile no longer builds ghcr.io/tandemkit/tandem-scheduler:v0.1.0: change the document with it")
	}
}
