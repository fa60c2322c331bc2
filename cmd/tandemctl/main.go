// Command tandemctl installs Tandem's node side (tandemctl node install: binary, systemd unit, kubelet
// drop-ins) and shows what Tandem's QoS policies did on a node: for every container its QoS class,
// cpuset, CFS quota, CPU shares, the pod's cpu.idle and the memory limit, as the kernel's cgroup files
// hold them next to what tandem-proxy last applied; and the CPU pools of the cpuset policy. It reads
// tandem-proxy's debug endpoints (on its --debug-socket, which only root may connect to) and
// /sys/fs/cgroup. See docs/tandemctl.md and docs/install.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/tandemkit/tandem/cmd/tandemctl/internal/node"
	"github.com/tandemkit/tandem/cmd/tandemctl/internal/report"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "node" {
		err = runNode(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tandemctl: %v\n", err)
		os.Exit(1)
	}
}

const usageHead = `tandemctl shows what Tandem's QoS policies did on this node.

Usage:
  tandemctl [flags] pods    one row per container: QoS class, cpuset, CFS quota/period, CPU shares,
                            cpu.idle of the pod, memory limit, read from the kernel's cgroup files and
                            compared with what tandem-proxy last applied
  tandemctl [flags] pools   the LSE, LSR, LS and BE CPU pools and each container's exclusive CPUs
  tandemctl [flags] config  every key of the slo-controller-config in force on this node, and what it
                            does here: applied, off, ignored (the kernel lacks it), refused or
                            unsupported (accepted, not acted on)
  tandemctl [flags] headroom  the steal headroom: whether BE is held below what the host of this
                            virtual machine gives, the steal per CPU, and the reason of the last hold
  tandemctl [flags] interference  the LS wait guard: LS pods' slow waits for a CPU, the BE ceiling,
                            and whether the last hold helped
  tandemctl [flags] capacity  why batch-cpu and batch-memory are what they are: every term of the
                            formula with this node's figures, the term that decides each, and what
                            the Node carries
  tandemctl node install    install tandem-proxy on this node; node rollback, node uninstall (see
                            tandemctl node --help)

Flags:
`

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := pflag.NewFlagSet("tandemctl", pflag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; --help prints below
	socket := fs.String("proxy-debug-socket", defaultDebugSocket(), "tandem-proxy's --debug-socket (by default debug.sock in its --state-dir), where it serves /debug/store and /debug/pools to root")
	proxyAddr := fs.String("proxy-addr", "", "only for a tandem-proxy older than --debug-socket: its --metrics-addr, where it served /debug/store and /debug/pools")
	cgroupRoot := fs.String("cgroup-root", "/sys/fs/cgroup", "cgroup mount to read the containers' settings from")
	output := fs.StringP("output", "o", "", "output format: wide (more columns) or json; the table when unset")
	all := fs.BoolP("all", "a", false, "pods: list exited containers too")
	states := fs.StringSlice("state", nil, "config: only keys in these states (applied, off, ignored, refused, unsupported)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for tandem-proxy")
	usage := func() {
		fmt.Fprint(stdout, usageHead)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		usage()
		return nil
	} else if err != nil {
		return fmt.Errorf("%w (see tandemctl --help)", err)
	}
	format, err := report.ParseFormat(*output)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("want one command, pods, pools, config, headroom, interference or capacity (see tandemctl --help)")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	client := report.NewClient(*socket)
	if *proxyAddr != "" {
		client = report.NewAddrClient(*proxyAddr)
	}
	switch fs.Arg(0) {
	case "pods":
		snap, err := client.Store(ctx)
		if err != nil {
			return err
		}
		return report.WritePods(stdout, report.BuildPods(snap, report.NewKernel(*cgroupRoot), *all), format)
	case "pools":
		pools, err := client.Pools(ctx)
		if err != nil {
			return err
		}
		snap, err := client.Store(ctx)
		if err != nil {
			return err
		}
		p, err := report.BuildPools(pools, snap)
		if err != nil {
			return err
		}
		return report.WritePools(stdout, p, format)
	case "config":
		d, err := client.Config(ctx)
		if err != nil {
			return err
		}
		if d, err = report.FilterStates(d, *states); err != nil {
			return err
		}
		return report.WriteConfig(stdout, d, format)
	case "headroom":
		s, err := client.Headroom(ctx)
		if err != nil {
			return err
		}
		return report.WriteHeadroom(stdout, s, format)
	case "interference":
		s, err := client.Interference(ctx)
		if err != nil {
			return err
		}
		return report.WriteInterference(stdout, s, format)
	case "capacity":
		s, err := client.Capacity(ctx)
		if err != nil {
			return err
		}
		return report.WriteCapacity(stdout, s, format)
	case "help":
		usage()
		return nil
	}
	return fmt.Errorf("unknown command %q: want pods, pools, config, headroom, interference or capacity (see tandemctl --help)", fs.Arg(0))
}

// defaultDebugSocket is where tandem-proxy serves its debug endpoints when installed as
// `tandemctl node install` installs it: debug.sock in its --state-dir.
func defaultDebugSocket() string { return filepath.Join(node.DefaultOptions().StateDir, "debug.sock") }
