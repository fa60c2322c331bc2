package node

import (
	"context"
	"fmt"
	"os"
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
// it when its binary or unit changed), and restart kubelet, once and last, when its drop-ins
// or flags changed, so that it connects to the proxy. A new binary alone restarts the proxy
// only: kubelet retries the runtime while it is down, and pods keep running. Each command is
// passed to report before it runs.
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

// RestartProxy restarts tandem-proxy alone, after Rollback swapped its binary: the unit is
// unchanged, and kubelet keeps running (its calls fail and are retried while the proxy is
// down; pods keep running).
func RestartProxy(ctx context.Context, run Runner, report func(cmd string)) error {
	return runAll(ctx, [][]string{{"systemctl", "restart", "tandem-proxy.service"}}, run, report)
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
