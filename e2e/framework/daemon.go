package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Daemon is a server a harness or a benchmark started with StartDaemon (etcd, kube-apiserver, a
// webhook): in a process group of its own, so that a Ctrl-C in the terminal reaches only the program
// that started it, which then stops it.
type Daemon struct {
	name, logPath string
	proc          *process
}

// StartDaemon starts bin with args, its output appended to logPath; env nil keeps the caller's
// environment. name is how errors call it.
func StartDaemon(name, bin string, args, env []string, logPath string) (*Daemon, error) {
	p, err := startProcess(bin, args, env, logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &Daemon{name: name, logPath: logPath, proc: p}, nil
}

// Name is the name StartDaemon was given.
func (d *Daemon) Name() string { return d.name }

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.proc.pid }

// Exited returns an error naming the daemon and quoting the end of its log once it has exited; nil
// while it runs.
func (d *Daemon) Exited() error {
	if d.proc.running() {
		return nil
	}
	err := d.proc.err
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited (%w); the end of its log:\n%s", d.name, err, d.LogTail(3000))
}

// LogTail is the last n bytes of the daemon's log, for error messages.
func (d *Daemon) LogTail(n int) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return tail(b, n)
}

// Stop sends SIGTERM and waits up to grace for the daemon to exit, then kills it.
func (d *Daemon) Stop(ctx context.Context, grace time.Duration) error {
	if err := d.proc.stop(ctx, syscall.SIGTERM, grace); err != nil {
		return fmt.Errorf("stop %s: %w", d.name, err)
	}
	return nil
}
