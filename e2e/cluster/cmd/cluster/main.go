// Command cluster runs Tandem's tier-2 test cluster: a two-node Kubernetes
// on this machine, each node's kubelet talking to its own containerd
// through its own tandem-proxy, installed by `tandemctl node install`; or,
// with --nri, to containerd directly, with Tandem as the NRI DaemonSet of
// deploy/nri; with --vm, a VM node (qemu, Debian 13, cgroup v2, systemd) joins
// by kubeadm beside the host nodes.
//
//	cluster build [--vm-image]    build (or find cached) the Kubernetes binaries, and the VM node's disk
//	cluster up   [--dir] [--containerd 1.6|2] [--nri] [--policies LIST|none] [--vm debian|2] [--host-nodes 1|2]
//	cluster down [--dir]
//	cluster status [--dir]
//
// The directory defaults to $TANDEM_CLUSTER_DIR, else /tmp/tandem-cluster;
// --containerd to $TANDEM_CLUSTER_CONTAINERD, --nri to
// TANDEM_CLUSTER_MODE=nri, --vm to $TANDEM_CLUSTER_VM, as for the tests.
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
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: cluster build [--vm-image] | up [--dir DIR] [--containerd 1.6|2] [--nri] [--policies LIST|none] [--vm debian|2] [--host-nodes 1|2] | down [--dir DIR] | status [--dir DIR]")
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
	flavor := fs.String("containerd", os.Getenv("TANDEM_CLUSTER_CONTAINERD"), "containerd of the nodes: 1.6 (Debian's) or 2 (v2.4.2, built once); default 1.6, and 2 with --nri")
	nri := fs.Bool("nri", os.Getenv("TANDEM_CLUSTER_MODE") == "nri", "run Tandem as deploy/nri's DaemonSet, an NRI plugin of each node's containerd (containerd 2), instead of tandem-proxy in front of it")
	policies := fs.String("policies", "", "override tandem-proxy's built-in policies, comma-separated; \"none\" for none; empty runs the installed unit as it is (every default policy)")
	proxyBin := fs.String("proxy-binary", "", "tandem-proxy binary to run (default: build ./cmd/tandem-proxy)")
	vm := fs.String("vm", os.Getenv("TANDEM_CLUSTER_VM"), "add the VM node (qemu, Debian 13, cgroup v2, systemd, joined by kubeadm) with this containerd: debian (Debian 13's 1.7) or 2 (v2.4.2); empty: none")
	vmImage := fs.Bool("vm-image", false, "build: also build (or find cached) the VM node's disk")
	hostNodes := fs.Int("host-nodes", 2, "host nodes beside the control plane: 2, or 1 (node-a alone)")
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
		if *vmImage {
			// The disk's debootstrap runs beside the Kubernetes build it waits for.
			im, err := cluster.EnsureVMImage(ctx)
			if err != nil {
				return err
			}
			fmt.Printf("VM node disk in %s (%s)\n", im.Dir, time.Since(t).Round(time.Second))
		}
		bin, err := cluster.EnsureKubernetes(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("Kubernetes %s binaries in %s (%s)\n", cluster.KubernetesVersion, bin, time.Since(t).Round(time.Second))
		return nil
	case "up":
		c, err := cluster.Up(ctx, cluster.Options{Dir: *dir, Flavor: *flavor, NRI: *nri, Policies: *policies, ProxyBinary: *proxyBin, VM: *vm, HostNodes: *hostNodes})
		if err != nil {
			return err
		}
		path := "kubelet -> tandem-proxy -> containerd " + c.Flavor
		if c.NRI {
			path = "kubelet -> containerd " + c.Flavor + " -> NRI plugin tandem-nri (DaemonSet " + cluster.NRINamespace + "/" + cluster.NRIDaemonSet + ")"
		}
		fmt.Printf("\nCluster up in %s: nodes %s, %s on each.\n", c.Dir, strings.Join(c.NodeNames(), ", "), path)
		if c.VM != nil {
			fmt.Printf("  VM node %s (containerd %s): ssh -i %s root@%s; console %s\n", c.VM.Name, c.VM.Flavor, c.VM.Key, c.VM.Addr, c.VM.Console)
		}
		for _, p := range c.Problems {
			fmt.Printf("  NOT AS DOCUMENTED: %s\n", p)
		}
		fmt.Printf("  export KUBECONFIG=%s\n  alias kubectl=%s\n  logs: %s/logs/, containerd: %s/<node>/c/containerd.log\n", c.Kubeconfig, c.Kubectl, c.Dir, c.Dir)
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
		show := func(name string) {
			state := "stopped"
			if pid := c.PID(name); pid != 0 {
				state = fmt.Sprintf("running, pid %d", pid)
			}
			fmt.Printf("  %-28s %s  (log %s)\n", name, state, c.Logs(name))
		}
		for _, name := range []string{cluster.Etcd, cluster.KubeAPIServer, cluster.KubeControllerManager, cluster.KubeScheduler} {
			show(name)
		}
		for _, n := range c.Nodes {
			if c.NRI {
				metrics, err := c.AgentMetrics(ctx, n.Name)
				if err != nil {
					metrics = err.Error()
				}
				fmt.Printf("node %s: cgroupRoot %s, NRI socket %s, state %s, tandem-nri pid %d, metrics %s (logs %s)\n",
					n.Name, n.CgroupRoot, n.NRISocket, n.StateDir, c.AgentPID(n.Name), metrics, c.AgentLogs(n.Name))
			} else {
				fmt.Printf("node %s: cgroupRoot %s, proxy socket %s, metrics %s, unit %s\n", n.Name, n.CgroupRoot, n.ProxySocket, n.ProxyMetrics, n.Unit)
				show(cluster.NodeDaemon(cluster.TandemProxy, n.Name))
			}
			show(cluster.NodeDaemon(cluster.Kubelet, n.Name))
			if ctrd, err := c.Containerd(ctx, n.Name); err == nil {
				fmt.Printf("  %-28s pid %d  (log %s)\n", "containerd "+c.Flavor, ctrd.PID(), ctrd.LogPath)
			}
			fmt.Printf("  CNI bridge %s, veths: %s\n", n.Bridge(), strings.Join(n.Veths(), " "))
		}
		for _, p := range c.Problems {
			fmt.Printf("NOT AS DOCUMENTED: %s\n", p)
		}
		return nil
	default:
		return usage()
	}
}
