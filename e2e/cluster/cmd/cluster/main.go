// Command cluster runs Tandem's tier-2 test cluster: a single-node
// Kubernetes whose kubelet talks to containerd through tandem-proxy.
//
//	cluster build                 build (or find cached) the Kubernetes binaries
//	cluster up   [--dir] [--containerd 1.6|2] [--policies all|LIST]
//	cluster down [--dir]
//	cluster status [--dir]
//
// The directory defaults to $TANDEM_CLUSTER_DIR, else /tmp/tandem-cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: cluster build | up [--dir DIR] [--containerd 1.6|2] [--policies all|LIST] | down [--dir DIR] | status [--dir DIR]")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	defDir := cluster.DefaultDir
	if d := os.Getenv("TANDEM_CLUSTER_DIR"); d != "" {
		defDir = d
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	dir := fs.String("dir", defDir, "the cluster's private directory")
	flavor := fs.String("containerd", framework.Flavor16, "containerd under the proxy: 1.6 (Debian's) or 2 (v2.4.2, built once)")
	policies := fs.String("policies", "", "tandem-proxy's built-in policies, comma-separated; \"all\" for its default; empty for none (the proxy only carries kubelet's calls)")
	proxyBin := fs.String("proxy-binary", "", "tandem-proxy binary to run (default: build ./cmd/tandem-proxy)")
	verbosity := fs.Int("v", 0, "log verbosity")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	if err := klogFlags.Set("v", fmt.Sprint(*verbosity)); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())

	switch args[0] {
	case "build":
		t := time.Now()
		bin, err := cluster.EnsureKubernetes(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("Kubernetes %s binaries in %s (%s)\n", cluster.KubernetesVersion, bin, time.Since(t).Round(time.Second))
		return nil
	case "up":
		c, err := cluster.Up(ctx, cluster.Options{Dir: *dir, Flavor: *flavor, Policies: *policies, ProxyBinary: *proxyBin})
		if err != nil {
			return err
		}
		fmt.Printf("\nCluster up in %s; kubelet -> tandem-proxy (%s) -> containerd %s.\n", c.Dir, c.ProxySocket, c.Flavor)
		fmt.Printf("  export KUBECONFIG=%s\n  alias kubectl=%s\n  logs: %s/logs/, containerd: %s\n", c.Kubeconfig, c.Kubectl, c.Dir, c.Logs("containerd"))
		fmt.Println(c.Kubeconfig)
		return nil
	case "down":
		c, err := cluster.Load(*dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				fmt.Printf("no cluster in %s\n", *dir)
				return nil
			}
			return err
		}
		return c.Down(context.WithoutCancel(ctx))
	case "status":
		c, err := cluster.Load(*dir)
		if err != nil {
			return err
		}
		fmt.Printf("cluster in %s, kubeconfig %s\n", c.Dir, c.Kubeconfig)
		for _, name := range []string{cluster.Etcd, cluster.KubeAPIServer, cluster.KubeControllerManager, cluster.KubeScheduler, cluster.TandemProxy, cluster.Kubelet} {
			state := "stopped"
			if pid := c.PID(name); pid != 0 {
				state = fmt.Sprintf("running, pid %d", pid)
			}
			fmt.Printf("  %-24s %s  (log %s)\n", name, state, c.Logs(name))
		}
		if ctrd, err := c.Containerd(ctx); err == nil {
			fmt.Printf("  %-24s pid %d  (log %s)\n", "containerd "+c.Flavor, ctrd.PID(), ctrd.LogPath)
		}
		fmt.Printf("  CNI bridge %s, veths: %s\n", c.Bridge(), strings.Join(c.Veths(), " "))
		return nil
	default:
		return usage()
	}
}
