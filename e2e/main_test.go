//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
)

// binDir receives the tandem-proxy built for this test run.
func binDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("tandem-e2e-bin-%d", os.Getpid()))
}

// proxyBinary builds tandem-proxy once per test run, on first use.
var proxyBinary = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return framework.BuildProxy(ctx, binDir())
})

// nriBinary builds tandem-nri once per test run, on first use.
var nriBinary = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return framework.BuildNRI(ctx, binDir())
})

// containerdV2 builds (or finds cached) containerd v2 once per test run.
var containerdV2 = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	return framework.EnsureContainerd(ctx, framework.Flavor2)
})

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		if err := framework.EnsureDebianPackages(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			cancel()
			os.Exit(1)
		}
		cancel()
		// The v2 build takes minutes the first time: start it while the
		// 1.6 tests run.
		for _, f := range flavors() {
			if f == framework.Flavor2 {
				go containerdV2() //nolint:errcheck // the first test that needs it reports the error
			}
		}
	}
	code := m.Run()
	_ = os.RemoveAll(binDir())
	if err := framework.RemovePodLogs(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: remove the pods' log directories: %v\n", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// flavors are the containerd flavors to test: $TANDEM_E2E_FLAVORS, default "1.6 2".
func flavors() []string {
	if v := strings.Fields(os.Getenv("TANDEM_E2E_FLAVORS")); len(v) > 0 {
		return v
	}
	return []string{framework.Flavor16, framework.Flavor2}
}

// requireRoot skips the test, loudly, when it cannot run containerd and runc.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: e2e tests run containerd and runc and need root; run them as root (see docs/e2e.md)")
	}
}

// env is one private containerd with a tandem-proxy in front of it, and
// cri-client connections to both.
type env struct {
	flavor     string
	nri        bool // tandem-nri runs as containerd's NRI plugin instead of tandem-proxy (envOptions.nri)
	dir        string
	containerd *framework.Containerd
	proxy      *framework.Proxy

	direct, viaProxy             internalapi.RuntimeService
	directImages, viaProxyImages internalapi.ImageManagerService
}

type envOptions struct {
	cni bool
	// proxyArgs are added to tandem-proxy's flags.
	proxyArgs []string
	// nri runs tandem-nri, Tandem as containerd's NRI plugin, instead of tandem-proxy in front of
	// containerd. Kubelet's side then talks to containerd itself: viaProxy is a connection to
	// containerd's CRI socket, on which containerd calls the plugin. Containerd 2 only.
	nri bool
}

// forEachRuntime runs fn as a subtest per containerd flavor, each with a
// fresh containerd and proxy that are torn down afterwards.
func forEachRuntime(t *testing.T, opts envOptions, fn func(t *testing.T, ctx context.Context, e *env)) {
	t.Helper()
	requireRoot(t)
	for _, flavor := range flavors() {
		t.Run("containerd-"+flavor, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e := newEnv(t, ctx, flavor, opts)
			fn(t, ctx, e)
		})
	}
}

// requireFlavor fails the test when flavor's containerd is not available (containerd 2 is built once).
func requireFlavor(t *testing.T, flavor string) {
	t.Helper()
	if flavor == framework.Flavor2 {
		if _, err := containerdV2(); err != nil {
			t.Fatalf("containerd v2 is not available: %v", err)
		}
	}
}

// privateContainerd starts a containerd of flavor for one test, in a new temporary directory named after
// prefix (short: unix socket paths live in it), and stops it and removes the directory when the test
// ends. The directory is returned for the test's own sockets and state.
func privateContainerd(t *testing.T, ctx context.Context, flavor, prefix string) (string, *framework.Containerd) {
	t.Helper()
	requireFlavor(t, flavor)
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctrd, err := framework.StartContainerd(ctx, framework.ContainerdOptions{Flavor: flavor, Dir: filepath.Join(dir, "ctrd")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := ctrd.Stop(sctx); err != nil {
			t.Errorf("stop containerd: %v", err)
		}
	})
	return dir, ctrd
}

func newEnv(t *testing.T, ctx context.Context, flavor string, opts envOptions) *env {
	t.Helper()
	requireFlavor(t, flavor)
	bin, err := proxyBinary()
	if opts.nri {
		bin, err = nriBinary()
	}
	if err != nil {
		t.Fatalf("Tandem does not build: %v", err)
	}
	// Short paths: unix sockets live in here.
	dir, err := os.MkdirTemp("", "tdm-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{flavor: flavor, nri: opts.nri, dir: dir}
	t.Cleanup(func() { e.teardown(t, ctx) })

	start := time.Now()
	ctrdOpts := framework.ContainerdOptions{Flavor: flavor, Dir: filepath.Join(dir, "ctrd"), CNI: opts.cni}
	if opts.nri {
		ctrdOpts.NRISocket = framework.NRISocketPath(ctrdOpts.Dir)
	}
	e.containerd, err = framework.StartContainerd(ctx, ctrdOpts)
	if err != nil {
		t.Fatalf("start containerd %s: %v", flavor, err)
	}
	e.proxy, err = framework.StartProxy(ctx, framework.ProxyOptions{
		Binary: bin, RuntimeEndpoint: e.containerd.Endpoint, Dir: filepath.Join(dir, "proxy"), ExtraArgs: opts.proxyArgs,
		NRISocket: e.containerd.NRISocket,
	})
	if err != nil {
		t.Fatalf("start tandem-proxy: %v", err)
	}
	e.direct, e.directImages, err = framework.NewCRIClients(ctx, e.containerd.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	e.viaProxy, e.viaProxyImages, err = framework.NewCRIClients(ctx, e.proxy.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	mode := "tandem-proxy in front of it"
	if opts.nri {
		mode = "tandem-nri as its NRI plugin"
	}
	t.Logf("containerd %s and %s ready in %s under %s", flavor, mode, time.Since(start).Round(time.Millisecond), dir)
	return e
}

// teardown stops the proxy and containerd and removes dir; after a failure
// it first copies both logs to the artifacts directory.
func (e *env) teardown(t *testing.T, ctx context.Context) {
	// The test's context ends with the test; clean-up must outlive it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	if e.proxy != nil {
		if _, err := e.proxy.Stop(ctx); err != nil {
			t.Errorf("stop tandem-proxy: %v", err)
		}
	}
	if e.containerd != nil {
		if err := e.containerd.Stop(ctx); err != nil {
			t.Errorf("stop containerd: %v", err)
		}
	}
	if t.Failed() {
		e.saveLogs(t)
	}
	if os.Getenv("TANDEM_E2E_KEEP") != "" {
		t.Logf("TANDEM_E2E_KEEP set: leaving %s", e.dir)
		return
	}
	if err := os.RemoveAll(e.dir); err != nil {
		t.Errorf("remove %s: %v", e.dir, err)
	}
}

// artifactsDir is where logs of failed tests go: $TANDEM_E2E_ARTIFACTS,
// default /tmp/tandem-e2e-artifacts.
func artifactsDir() string {
	if d := os.Getenv("TANDEM_E2E_ARTIFACTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "tandem-e2e-artifacts")
}

func (e *env) saveLogs(t *testing.T) {
	dst := filepath.Join(artifactsDir(), strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Logf("save logs: %v", err)
		return
	}
	for name, src := range map[string]string{
		"containerd.log":  filepath.Join(e.dir, "ctrd", "containerd.log"),
		"containerd.toml": filepath.Join(e.dir, "ctrd", "config.toml"),
		"proxy.log":       filepath.Join(e.dir, "proxy", "proxy.log"),
	} {
		if b, err := os.ReadFile(src); err == nil {
			_ = os.WriteFile(filepath.Join(dst, name), b, 0o644)
		}
	}
	t.Logf("logs saved to %s", dst)
}

// runPod runs a pod of n sleeping containers through rs and removes it when
// the test ends (through the direct connection, so that clean-up works
// even after a test broke the proxy).
func (e *env) runPod(t *testing.T, ctx context.Context, rs internalapi.RuntimeService, name string, hostNetwork bool, n int) (string, []string) {
	t.Helper()
	cfg := framework.PodSandboxConfig(name, "e2e", hostNetwork)
	podID, ids, err := framework.RunPod(ctx, rs, cfg, n)
	if podID != "" {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := framework.RemovePod(ctx, e.direct, podID); err != nil {
				t.Errorf("clean up pod %s: %v", name, err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return podID, ids
}
