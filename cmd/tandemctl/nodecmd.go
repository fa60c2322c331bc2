package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/tandemkit/tandem/cmd/tandemctl/internal/node"
)

const nodeUsage = `tandemctl node installs Tandem's node side: the tandem-proxy binary, its systemd unit,
kubelet's systemd drop-in and the KubeletConfiguration drop-in that points kubelet at the proxy.

Usage:
  tandemctl node install [flags]     write the files (idempotent), then enable and start them
  tandemctl node uninstall [flags]   remove them; kubelet goes back to containerd

Flags:
`

// runNode runs `tandemctl node ...`; args follow "node".
func runNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	def := node.DefaultOptions()
	o := def
	fs := pflag.NewFlagSet("tandemctl node", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Prefix, "prefix", def.Prefix, "install below this directory instead of /; the unit's ExecStart names the binary there")
	fs.StringVar(&o.Binary, "binary", "", "tandem-proxy executable to install (default: tandem-proxy beside tandemctl)")
	fs.StringVar(&o.KubeletConfigDir, "kubelet-config-dir", def.KubeletConfigDir, "kubelet's --config-dir, where the KubeletConfiguration drop-in goes (below --prefix)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", def.Kubeconfig, "tandem-proxy --kubeconfig: the node's kubelet credentials")
	fs.StringVar(&o.RuntimeEndpoint, "runtime-endpoint", def.RuntimeEndpoint, "tandem-proxy --runtime-endpoint: containerd's socket")
	fs.StringVar(&o.Listen, "listen", def.Listen, "tandem-proxy --listen: the socket kubelet is pointed at")
	fs.StringVar(&o.KubeletCgroupRoot, "kubelet-cgroup-root", def.KubeletCgroupRoot, "tandem-proxy --kubelet-cgroup-root: kubelet's cgroupRoot")
	fs.StringVar(&o.NodeName, "node-name", def.NodeName, "tandem-proxy --node-name (default: the proxy's, the hostname)")
	fs.StringVar(&o.StateDir, "state-dir", def.StateDir, "tandem-proxy --state-dir")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", def.MetricsAddr, "tandem-proxy --metrics-addr")
	fs.StringVar(&o.HooksDir, "hooks-dir", def.HooksDir, "tandem-proxy --hooks-dir")
	fs.StringArrayVar(&o.ProxyArgs, "proxy-arg", nil, "another tandem-proxy flag for the unit, as --flag=value (repeat for more)")
	start := fs.Bool("start", false, "run systemctl to (re)start what changed (default: true when --prefix is / and systemd runs)")
	usage := func() {
		fmt.Fprint(stdout, nodeUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); errors.Is(err, pflag.ErrHelp) {
		usage()
		return nil
	} else if err != nil {
		return fmt.Errorf("%w (see tandemctl node --help)", err)
	}
	if fs.NArg() != 1 || (fs.Arg(0) != "install" && fs.Arg(0) != "uninstall") {
		return errors.New("want install or uninstall (see tandemctl node --help)")
	}
	if !fs.Changed("start") {
		*start = filepath.Clean(o.Prefix) == "/" && node.SystemdRunning()
	}
	report := func(cmd string) { fmt.Fprintf(stdout, "ran %s\n", cmd) }

	if fs.Arg(0) == "uninstall" {
		changes, err := node.Uninstall(o)
		printChanges(stdout, changes)
		if err != nil {
			return err
		}
		if *start {
			return node.Stop(ctx, runCommand, report)
		}
		return nil
	}

	if o.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find tandemctl's own path to look for tandem-proxy beside it (pass --binary): %w", err)
		}
		o.Binary = filepath.Join(filepath.Dir(self), "tandem-proxy")
	}
	res, err := node.Install(o)
	printChanges(stdout, res.Changes)
	if err != nil {
		return err
	}
	if filepath.Clean(o.Prefix) == "/" {
		for _, w := range node.KubeletConfigDirWarning("/proc", o.KubeletConfigDir) {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
	}
	if *start {
		return node.Start(ctx, res, runCommand, report)
	}
	if res.ProxyChanged || res.KubeletChanged {
		fmt.Fprintln(stdout, "not started (--start=false): run systemctl daemon-reload, enable --now tandem-proxy.service and restart kubelet.service, or start the unit's ExecStart yourself")
	}
	return nil
}

func printChanges(w io.Writer, changes []node.Change) {
	for _, c := range changes {
		fmt.Fprintf(w, "%-9s %s\n", c.Action, c.Path)
	}
}

func runCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}
