package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Flavors of containerd the harness can run.
const (
	Flavor16 = "1.6" // Debian's containerd 1.6 + runc from apt
	Flavor2  = "2"   // containerd v2.4.2 built from the Go module proxy, cached under CacheDir()
)

// debianPackages lists what a fresh Debian 12 machine lacks for the e2e
// tests: the runtime, a static busybox for the test image and the CNI plugins
// for pod networking.
func debianPackages() []string {
	return []string{"containerd", "runc", "busybox-static", "containernetworking-plugins"}
}

// CacheDir returns where built binaries are cached between runs: $TANDEM_CACHE_DIR,
// else ~/.cache/tandem. It lives outside the repository so that a clean tree
// keeps its cache.
func CacheDir() string {
	if d := os.Getenv("TANDEM_CACHE_DIR"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tandem")
	}
	return filepath.Join(os.TempDir(), "tandem-cache")
}

// EnsureDebianPackages installs containerd, runc, busybox-static and
// containernetworking-plugins with apt-get when any of them is missing.
func EnsureDebianPackages(ctx context.Context) error {
	var missing []string
	for _, p := range debianPackages() {
		out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Status}", p).Output()
		if err != nil || !strings.Contains(string(out), "install ok installed") {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("packages %s are missing: install them as root (apt-get install -y %s)",
			strings.Join(missing, " "), strings.Join(missing, " "))
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	update := exec.CommandContext(ctx, "apt-get", "update")
	update.Env = env
	if out, err := update.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, tail(out, 2000))
	}
	install := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "--no-install-recommends"}, missing...)...)
	install.Env = env
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %w: %s", strings.Join(missing, " "), err, tail(out, 2000))
	}
	return nil
}

// tail returns the last n bytes of b, for error messages that quote a log.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
