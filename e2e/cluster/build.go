package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/tandemkit/tandem/e2e/framework"
)

// KubernetesVersion is the k8s.io/kubernetes release whose commands the
// cluster runs; this module's go.mod pins the same version.
const KubernetesVersion = "v1.36.3"

// Commands built from k8s.io/kubernetes, by binary name.
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubelet               = "kubelet"
	Kubectl               = "kubectl"
	// Kubeadm joins the VM node to the cluster as `kubeadm join` joins a node users run.
	Kubeadm = "kubeadm"
)

func kubernetesCommands() []string {
	return []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubelet, Kubectl, Kubeadm}
}

// KubernetesBinDir is where the Kubernetes commands of KubernetesVersion are
// cached: outside the repository, so that a clean checkout keeps them.
func KubernetesBinDir() string {
	return filepath.Join(framework.CacheDir(), "kubernetes-"+KubernetesVersion)
}

// KubernetesCached reports whether every command is in the cache, so that
// callers can say a build of several minutes is coming.
func KubernetesCached() bool {
	return binariesIn(KubernetesBinDir())
}

func binariesIn(dir string) bool {
	for _, c := range kubernetesCommands() {
		if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
			return false
		}
	}
	return true
}

// EnsureKubernetes returns the directory holding kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet and kubectl, building them
// from this module (go.mod pins k8s.io/kubernetes) the first time. The build
// takes about ten minutes on two cores; a second caller waits on a lock.
func EnsureKubernetes(ctx context.Context) (string, error) {
	dir := KubernetesBinDir()
	if binariesIn(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("create cache dir: %w", err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	if binariesIn(dir) {
		return dir, nil
	}
	mod, err := moduleDir()
	if err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", tmp, err)
	}
	args := []string{"build", "-trimpath", "-ldflags", versionLDFlags(), "-o", tmp + "/"}
	for _, c := range kubernetesCommands() {
		args = append(args, "k8s.io/kubernetes/cmd/"+c)
	}
	cmd := exec.CommandContext(ctx, framework.GoBinary(), args...)
	cmd.Dir = mod
	// -mod=mod: this module replaces Tandem with ../.., so a dependency
	// Tandem's go.mod gained since this go.mod was tidied must not stop
	// the build.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build Kubernetes %s (go %s in %s): %w: %s", KubernetesVersion, strings.Join(args, " "), mod, err, tail(out, 4000))
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("clear %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("install Kubernetes build: %w", err)
	}
	return dir, nil
}

// versionLDFlags stamps the release into the binaries as the Kubernetes
// build scripts do; unstamped, they call themselves v0.0.0 and kubectl warns
// about version skew on every call.
func versionLDFlags() string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var b strings.Builder
	b.WriteString("-s -w")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&b, " -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
			pkg, KubernetesVersion, pkg, major, pkg, minor, pkg)
	}
	return b.String()
}

// moduleDir returns the directory of this module's go.mod, found from this
// file's source path.
func moduleDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(file)
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("cannot find the e2e/cluster module: run from a Tandem checkout")
}

// RepoRoot returns the root of the Tandem checkout this module lives in.
func RepoRoot() (string, error) {
	mod, err := moduleDir()
	if err != nil {
		return "", err
	}
	return filepath.Clean(filepath.Join(mod, "..", "..")), nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
