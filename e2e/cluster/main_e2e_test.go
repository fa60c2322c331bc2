//go:build e2e

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
)

// testDir is where the suite brings up its own cluster. It is fixed so that
// `make e2e-cluster` can run `cluster down` on it even when the test binary
// was killed (a -timeout panic skips TestMain's clean-up).
const testDir = "/tmp/tandem-cluster-e2e"

// env is the cluster under test, set up once by TestMain. Every test uses it
// and leaves it as it found it (its own objects deleted).
type env struct {
	c *cluster.Cluster
}

// suite is the one cluster of this test binary.
var suite env

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Println("e2e/cluster: skipped: the cluster tier needs root (containerd, runc, kubelet)")
		return 0
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	start := time.Now()
	var (
		c   *cluster.Cluster
		err error
	)
	if os.Getenv("TANDEM_CLUSTER_REUSE") != "" {
		// A cluster from `make cluster-up`: test it and leave it running.
		dir := os.Getenv("TANDEM_CLUSTER_DIR")
		if dir == "" {
			dir = cluster.DefaultDir
		}
		if c, err = cluster.Load(dir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e/cluster:", err)
			return 1
		}
		fmt.Printf("e2e/cluster: reusing the cluster in %s\n", dir)
	} else {
		// A previous run killed before its clean-up left its cluster here.
		if old, err := cluster.Load(testDir); err == nil {
			fmt.Printf("e2e/cluster: removing the cluster a previous run left in %s\n", testDir)
			if err := old.Down(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "e2e/cluster: remove old cluster:", err)
				return 1
			}
		}
		// TANDEM_CLUSTER_MODE=nri: Tandem as the NRI DaemonSet, on containerd 2 unless told.
		nri := os.Getenv("TANDEM_CLUSTER_MODE") == "nri"
		flavor := os.Getenv("TANDEM_CLUSTER_CONTAINERD")
		if flavor == "" && !nri {
			flavor = framework.Flavor16
		}
		upCtx, cancel := context.WithTimeout(ctx, 30*time.Minute)
		// Every default policy, API access through each node's kubelet
		// credentials, as `tandemctl node install` sets tandem-proxy up;
		// TANDEM_CLUSTER_POLICIES overrides the policies ("none": none).
		// TANDEM_CLUSTER_VM=debian or 2: the VM node beside one host node (docs/e2e-cluster.md).
		vm := os.Getenv("TANDEM_CLUSTER_VM")
		hostNodes := 0
		if vm != "" {
			hostNodes = 1
		}
		c, err = cluster.Up(upCtx, cluster.Options{Dir: testDir, Flavor: flavor, NRI: nri, Policies: os.Getenv("TANDEM_CLUSTER_POLICIES"), ProxyBinary: os.Getenv("TANDEM_PROXY_BINARY"), VM: vm, HostNodes: hostNodes})
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e/cluster: cluster up:", err)
			return 1
		}
		mode := "tandem-proxy"
		if c.NRI {
			mode = "NRI mode"
		}
		if c.VM != nil {
			mode += ", VM node " + c.VM.Name + " with containerd " + c.VM.Flavor
		}
		fmt.Printf("e2e/cluster: cluster up in %s (containerd %s, %s) in %s; kubeconfig %s\n",
			c.Dir, c.Flavor, mode, time.Since(start).Round(100*time.Millisecond), c.Kubeconfig)
	}
	suite.c = c

	code := m.Run()

	if code != 0 {
		saveArtifacts(c)
	}
	if os.Getenv("TANDEM_CLUSTER_REUSE") != "" {
		return code
	}
	t := time.Now()
	if err := c.Down(ctx); err != nil {
		// Leftovers are a failure of the tier: `make cluster-down` must
		// leave the host clean.
		fmt.Fprintln(os.Stderr, "e2e/cluster: cluster down:", err)
		return 1
	}
	fmt.Printf("e2e/cluster: cluster down in %s, nothing left behind\n", time.Since(t).Round(100*time.Millisecond))
	return code
}

// saveArtifacts copies every daemon's log to $TANDEM_E2E_ARTIFACTS/cluster
// before Down removes the directory.
func saveArtifacts(c *cluster.Cluster) {
	root := os.Getenv("TANDEM_E2E_ARTIFACTS")
	if root == "" {
		root = "/tmp/tandem-e2e-artifacts"
	}
	dst := filepath.Join(root, "cluster")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e/cluster: save logs:", err)
		return
	}
	copyTo := func(src, dst string) {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "e2e/cluster: save logs:", err)
			return
		}
		if out, err := exec.Command("cp", "-a", src, dst+"/").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/cluster: copy %s: %v: %s\n", src, err, out)
		}
	}
	copyTo(filepath.Join(c.Dir, "logs"), dst)
	if c.NRI {
		// The plugin logs to its container's log, below each node's pod log directory.
		copyTo(c.NRIOverlay(), dst)
		for _, n := range c.Nodes {
			logs, _ := filepath.Glob(filepath.Join(n.Dir, "pods", cluster.NRINamespace+"_"+cluster.NRIDaemonSet+"-*"))
			for _, l := range logs {
				copyTo(l, filepath.Join(dst, n.Name))
			}
		}
	}
	copyTo(filepath.Join(c.Dir, "kube-scheduler-config.yaml"), dst)
	for _, n := range c.Nodes {
		for _, src := range []string{n.ContainerdLog(), filepath.Join(n.Dir, "kubelet-config.yaml"), n.KubeletConfigDir, n.Unit} {
			if src != "" {
				copyTo(src, filepath.Join(dst, n.Name))
			}
		}
	}
	if c.VM != nil {
		// The VM's own journal: kubelet, containerd and Tandem's agent as systemd ran them.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := c.VM.Run(ctx, "journalctl --no-pager -o short-precise -u kubelet -u containerd -u tandem-proxy")
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e/cluster: the VM's journal:", err)
		}
		if err := os.MkdirAll(filepath.Join(dst, c.VM.Name), 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dst, c.VM.Name, "journal.log"), []byte(out), 0o644)
		}
	}
	fmt.Printf("e2e/cluster: logs of the failed run are in %s\n", dst)
}

// testContext returns a context for one test, ending at its deadline or
// after limit, with the test's logger for the cluster code.
func testContext(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return klog.NewContext(ctx, klog.Background())
}
