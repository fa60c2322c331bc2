package framework

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
)

// ContainerdV2Version is the containerd release that Flavor2 builds.
const ContainerdV2Version = "v2.4.2"

// containerdV2Packages are built together so the shim and ctr match the daemon.
func containerdV2Packages() []string {
	return []string{
		"github.com/containerd/containerd/v2/cmd/containerd",
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
		"github.com/containerd/containerd/v2/cmd/ctr",
	}
}

// containerdBinaries are the paths of one flavor's daemon and client.
type containerdBinaries struct {
	containerd string
	ctr        string
	// binDir goes first on the daemon's PATH so that it starts the shim of
	// its own version rather than Debian's.
	binDir string
}

// EnsureContainerd returns the containerd binary of flavor: Debian's for
// Flavor16, and for Flavor2 a v2.4.2 build (daemon, runc shim and ctr) made
// once into CacheDir()/containerd-v2.4.2. The build takes minutes on two
// cores; call this early and in the background when you can.
func EnsureContainerd(ctx context.Context, flavor string) (string, error) {
	b, err := ensureContainerd(ctx, flavor)
	if err != nil {
		return "", err
	}
	return b.containerd, nil
}

func ensureContainerd(ctx context.Context, flavor string) (containerdBinaries, error) {
	switch flavor {
	case Flavor16:
		for _, bin := range []string{"/usr/bin/containerd", "/usr/bin/ctr", "/usr/bin/containerd-shim-runc-v2"} {
			if _, err := os.Stat(bin); err != nil {
				return containerdBinaries{}, fmt.Errorf("containerd 1.6 is not installed (%w): run EnsureDebianPackages or apt-get install containerd runc", err)
			}
		}
		return containerdBinaries{containerd: "/usr/bin/containerd", ctr: "/usr/bin/ctr", binDir: "/usr/bin"}, nil
	case Flavor2:
		dir := filepath.Join(CacheDir(), "containerd-"+ContainerdV2Version)
		b := containerdBinaries{
			containerd: filepath.Join(dir, "containerd"),
			ctr:        filepath.Join(dir, "ctr"),
			binDir:     dir,
		}
		if complete(dir) {
			return b, nil
		}
		if err := buildContainerdV2(ctx, dir); err != nil {
			return containerdBinaries{}, err
		}
		return b, nil
	default:
		return containerdBinaries{}, fmt.Errorf("unknown containerd flavor %q: use %q or %q", flavor, Flavor16, Flavor2)
	}
}

// ContainerdV2Cached reports whether the containerd v2 build is in the cache,
// so that callers can warn before a build of several minutes.
func ContainerdV2Cached() bool {
	return complete(filepath.Join(CacheDir(), "containerd-"+ContainerdV2Version))
}

// complete reports whether dir holds every binary of the v2 build.
func complete(dir string) bool {
	for _, p := range containerdV2Packages() {
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(p))); err != nil {
			return false
		}
	}
	return true
}

// buildContainerdV2 builds containerd v2 through a throw-away wrapper module:
// `go install pkg@version` refuses containerd's go.mod (it has exclude
// directives), and the product's go.mod must not carry containerd's tree.
func buildContainerdV2(ctx context.Context, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create cache dir: %w", err)
	}
	// Two test binaries may start at once; one builds, the other waits.
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closing the file unlocks too
	if complete(dir) {
		return nil
	}

	mod, err := os.MkdirTemp("", "tandem-containerd-build-")
	if err != nil {
		return fmt.Errorf("create build dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(mod) }()
	gomod := "module tandem.local/containerd-build\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 " + ContainerdV2Version + "\n"
	var imports strings.Builder
	for _, p := range containerdV2Packages() {
		fmt.Fprintf(&imports, "\t_ %q\n", p)
	}
	tools := "//go:build tools\n\n// Package tools pins the containerd commands that are built.\npackage tools\n\nimport (\n" + imports.String() + ")\n"
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644); err != nil {
		return fmt.Errorf("write wrapper go.mod: %w", err)
	}
	if err := os.WriteFile(filepath.Join(mod, "tools.go"), []byte(tools), 0o644); err != nil {
		return fmt.Errorf("write wrapper tools.go: %w", err)
	}
	out := dir + ".tmp"
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("clear %s: %w", out, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}
	steps := [][]string{
		{"mod", "tidy"},
		append([]string{"build", "-tags", "no_btrfs", "-o", out + "/"}, containerdV2Packages()...),
	}
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, GoBinary(), args...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build containerd %s (go %s): %w: %s", ContainerdV2Version, strings.Join(args, " "), err, tail(b, 4000))
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	if err := os.Rename(out, dir); err != nil {
		return fmt.Errorf("install containerd build: %w", err)
	}
	return nil
}

// GoBinary finds the go command: on PATH, else in $GOROOT, else where the Go tarball installs it (where
// the Makefile looks too).
func GoBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	return "/usr/local/go/bin/go"
}

// RepoRoot returns the root of the Tandem module, found from this file's
// source path, else from `go env GOMOD` in the working directory.
func RepoRoot(ctx context.Context) (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return root, nil
		}
	}
	out, err := exec.CommandContext(ctx, GoBinary(), "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the repository root with go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("cannot find the repository root: run from inside the Tandem checkout")
	}
	return filepath.Dir(gomod), nil
}

// BuildProxy builds ./cmd/tandem-proxy into outDir and returns the binary's path.
func BuildProxy(ctx context.Context, outDir string) (string, error) {
	return BuildCommand(ctx, outDir, "tandem-proxy")
}

// BuildNRI builds ./cmd/tandem-nri, Tandem as an NRI plugin, into outDir and returns the binary's path.
func BuildNRI(ctx context.Context, outDir string) (string, error) {
	return BuildCommand(ctx, outDir, "tandem-nri")
}

// BuildTags are the build tags of every Tandem binary: the Makefile's GOTAGS, which says why.
const BuildTags = "grpcnotrace"

// BuildCommand builds ./cmd/<name> of the repository into outDir, as `make build` does (static, with
// BuildTags), and returns the binary's path.
func BuildCommand(ctx context.Context, outDir, name string) (string, error) {
	return BuildPackage(ctx, outDir, "./cmd/"+name, name)
}

// BuildPackage builds the main package pkg (a path relative to the repository root, "./bench/...") into
// outDir/name the way BuildCommand builds Tandem's commands, and returns the binary's path.
func BuildPackage(ctx context.Context, outDir, pkg, name string) (string, error) {
	root, err := RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(outDir, name)
	cmd := exec.CommandContext(ctx, GoBinary(), "build", "-tags", BuildTags, "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w: %s", name, err, tail(out, 4000))
	}
	return bin, nil
}

// buildPause builds the static pause binary of the test image.
func buildPause(ctx context.Context, out string) error {
	root, err := RepoRoot(ctx)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, GoBinary(), "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./e2e/framework/pause")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build pause: %w: %s", err, tail(b, 4000))
	}
	return nil
}

// BuildScheduler builds tandem-scheduler (kube-scheduler with the TandemLoadAware plugin) from its
// own module, scheduler-plugin, which carries k8s.io/kubernetes so that Tandem's go.mod does not,
// into outDir, and returns the binary's path.
func BuildScheduler(ctx context.Context, outDir string) (string, error) {
	root, err := RepoRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(outDir, "tandem-scheduler")
	cmd := exec.CommandContext(ctx, GoBinary(), "build", "-o", bin, "./cmd/tandem-scheduler")
	cmd.Dir = filepath.Join(root, "scheduler-plugin")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build tandem-scheduler: %w: %s", err, tail(out, 4000))
	}
	return bin, nil
}
