package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SystemdRunning reports whether systemd is the init system (as sd_booted(3) checks).
func SystemdRunning() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}

// Runner runs one command and returns its combined output.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// Start makes systemd take an install up: reload units, enable and start tandem-proxy (restart
// it when its binary or unit changed), and restart kubelet when its drop-ins changed, so that
// it connects to the proxy. Each command is passed to report before it runs.
func Start(ctx context.Context, res Result, run Runner, report func(cmd string)) error {
	cmds := [][]string{{"systemctl", "daemon-reload"}, {"systemctl", "enable", "--now", "tandem-proxy.service"}}
	if res.ProxyChanged {
		cmds = append(cmds, []string{"systemctl", "restart", "tandem-proxy.service"})
	}
	if res.KubeletChanged {
		cmds = append(cmds, []string{"systemctl", "restart", "kubelet.service"})
	}
	return runAll(ctx, cmds, run, report)
}

// Stop undoes Start after Uninstall removed the files: kubelet restarts on containerd first,
// then the proxy stops (and, stopping, gives BE pods back any CPU it had suppressed).
func Stop(ctx context.Context, run Runner, report func(cmd string)) error {
	return runAll(ctx, [][]string{
		{"systemctl", "daemon-reload"},
		{"systemctl", "restart", "kubelet.service"},
		{"systemctl", "disable", "--now", "tandem-proxy.service"},
	}, run, report)
}

func runAll(ctx context.Context, cmds [][]string, run Runner, report func(string)) error {
	for _, c := range cmds {
		line := strings.Join(c, " ")
		report(line)
		if out, err := run(ctx, c[0], c[1:]...); err != nil {
			return fmt.Errorf("%s: %w: %s", line, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// KubeletConfigDirWarning looks for running kubelets in procRoot (/proc) and returns a warning
// for each that does not read dir with --config-dir, because such a kubelet never sees the
// drop-in and keeps talking to containerd directly, bypassing the proxy.
func KubeletConfigDirWarning(procRoot, dir string) []string {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	var warnings []string
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		got := ""
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, "--config-dir="); ok {
				got = v
			} else if a == "--config-dir" && i+1 < len(args) {
				got = args[i+1]
			}
		}
		if filepath.Clean(got) == filepath.Clean(dir) && got != "" {
			continue
		}
		have := "without --config-dir"
		if got != "" {
			have = "with --config-dir=" + got
		}
		warnings = append(warnings, fmt.Sprintf("kubelet (pid %s) runs %s, so it will not read %s and keeps using its old runtime endpoint: "+
			"add --config-dir=%s to kubelet's flags (kubeadm: KUBELET_EXTRA_ARGS in /etc/default/kubelet) or pass --kubelet-config-dir, see docs/install.md",
			e.Name(), have, filepath.Join(dir, kubeletConfigFile), dir))
	}
	slices.Sort(warnings)
	return warnings
}
