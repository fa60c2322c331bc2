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
  tandemctl node install [flags]     write the files (idempotent), then enable and start them. First
                                     refuses, writing nothing, if a kubelet flag names another
                                     runtime endpoint (a flag beats the drop-in). Without
                                     --kubelet-config-dir the drop-in goes into the --config-dir
                                     kubelet has; if it has none, install adds one to
                                     KUBELET_EXTRA_ARGS in kubelet's environment file. An installed
                                     binary it replaces is kept as tandem-proxy.previous.
  tandemctl node rollback [flags]    swap the installed tandem-proxy with tandem-proxy.previous and
                                     restart tandem-proxy alone (a second rollback rolls forward)
  tandemctl node uninstall [flags]   remove them, and the --config-dir install added; kubelet goes
                                     back to containerd

Flags:
`

// nodeCmd runs `tandemctl node ...`; tests give it a fake systemctl and /proc.
type nodeCmd struct {
	run node.Runner
	// procRoot, when set, is where running kubelets are looked for whatever --prefix says.
	procRoot string
	// patcher returns the client uninstall takes the agent's publications off the Node with.
	patcher func(kubeconfig string) (node.NodePatcher, error)
}

// runNode runs `tandemctl node ...`; args follow "node".
func runNode(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return nodeCmd{run: runCommand, patcher: node.KubeNodePatcher}.main(ctx, args, stdout, stderr)
}

func (c nodeCmd) main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	def := node.DefaultOptions()
	o := def
	fs := pflag.NewFlagSet("tandemctl node", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Prefix, "prefix", def.Prefix, "install below this directory instead of /, and read kubelet's files there (not /proc); the unit's ExecStart names the binary there")
	fs.StringVar(&o.Binary, "binary", "", "tandem-proxy executable to install (default: tandem-proxy beside tandemctl)")
	fs.StringVar(&o.KubeletConfigDir, "kubelet-config-dir", "", "kubelet's --config-dir, where the KubeletConfiguration drop-in goes (below --prefix) "+
		"(default: the --config-dir kubelet's flags give it, else "+node.DefaultKubeletConfigDir+")")
	fs.StringVar(&o.KubeletEnvFile, "kubelet-env-file", "", "environment file whose KUBELET_EXTRA_ARGS gets --config-dir when kubelet has none (below --prefix) "+
		"(default: /etc/default/kubelet or /etc/sysconfig/kubelet, the one kubelet.service reads)")
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
	if fs.NArg() != 1 || (fs.Arg(0) != "install" && fs.Arg(0) != "uninstall" && fs.Arg(0) != "rollback") {
		return errors.New("want install, uninstall or rollback (see tandemctl node --help)")
	}
	onNode := filepath.Clean(o.Prefix) == "/"
	if !fs.Changed("start") {
		*start = onNode && node.SystemdRunning()
	}
	// Below another prefix, this machine's kubelet is not the one being installed for.
	switch {
	case c.procRoot != "":
		o.ProcRoot = c.procRoot
	case !onNode:
		o.ProcRoot = ""
	}
	report := func(cmd string) { fmt.Fprintf(stdout, "ran %s\n", cmd) }

	switch fs.Arg(0) {
	case "uninstall":
		changes, err := node.Uninstall(o)
		printChanges(stdout, changes)
		if err != nil {
			return err
		}
		if !*start {
			return nil
		}
		if err := node.Stop(ctx, c.run, report); err != nil {
			return err
		}
		// With the agent stopped, what it published on the Node goes too. A failure leaves the node
		// uninstalled: it is said, with what to run instead.
		if c.patcher == nil {
			return nil
		}
		name, err := node.NodeName(o.NodeName)
		if err == nil {
			var p node.NodePatcher
			if p, err = c.patcher(o.Kubeconfig); err == nil {
				err = node.Withdraw(ctx, p, name)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "warning: batch capacity and the tandem.io/node-metric annotation stay on the Node: %v; "+
				"take them off from a machine with cluster access (docs/install.md, Uninstall)\n", err)
			return nil
		}
		fmt.Fprintf(stdout, "withdrew kubernetes.io/batch-cpu, kubernetes.io/batch-memory and tandem.io/node-metric from Node %s\n", name)
		return nil
	case "rollback":
		res, err := node.Rollback(o)
		printChanges(stdout, res.Changes)
		if err != nil {
			return err
		}
		if *start && res.ProxyChanged {
			return node.RestartProxy(ctx, c.run, report)
		}
		if res.ProxyChanged {
			fmt.Fprintln(stdout, "not started (--start=false): run systemctl restart tandem-proxy.service")
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
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if err != nil {
		return err
	}
	if *start {
		return node.Start(ctx, res, c.run, report)
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
