package framework

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a daemon the harness started (or, for a demo left running,
// found again by pid). Daemons run in their own process group so that a
// Ctrl-C in the terminal reaches only the harness, which then cleans up.
type process struct {
	pid  int
	cmd  *exec.Cmd     // nil for a process found by pid
	done chan struct{} // closed when a started process has been reaped
	err  error         // Wait's result, valid once done is closed
}

func startProcess(bin string, args, env []string, logPath string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", logPath, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &process{pid: cmd.Process.Pid, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// findProcess returns the live process pid, started by an earlier run.
func findProcess(pid int) (*process, error) {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return nil, fmt.Errorf("process %d is not running", pid)
	}
	return &process{pid: pid}, nil
}

func (p *process) running() bool {
	if p == nil {
		return false
	}
	if p.cmd != nil {
		select {
		case <-p.done:
			return false
		default:
			return true
		}
	}
	return alive(p.pid)
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' {
			return i+2 >= len(b) || b[i+2] != 'Z'
		}
	}
	return true
}

// wait blocks until the process is gone or ctx ends.
func (p *process) wait(ctx context.Context) error {
	if p.cmd != nil {
		select {
		case <-p.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for alive(p.pid) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// exitCode is the exit status of a started process that has exited, or -1.
func (p *process) exitCode() int {
	if p.cmd == nil || p.running() {
		return -1
	}
	var exitErr *exec.ExitError
	if errors.As(p.err, &exitErr) {
		return exitErr.ExitCode()
	}
	return p.cmd.ProcessState.ExitCode()
}

// kill sends SIGKILL and waits up to timeout for the process to be gone.
func (p *process) kill(timeout time.Duration) error {
	if !p.running() {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %d: %w", p.pid, err)
	}
	deadline := time.Now().Add(timeout)
	for p.running() {
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d did not exit within %s of SIGKILL", p.pid, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// stop sends sig, waits up to grace for the process to exit, then kills it.
func (p *process) stop(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	if !p.running() {
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", p.pid, err)
	}
	wctx, cancel := context.WithTimeout(ctx, grace)
	err := p.wait(wctx)
	cancel()
	if err == nil {
		return nil
	}
	if err := p.kill(10 * time.Second); err != nil {
		return err
	}
	return fmt.Errorf("process %d ignored signal %d for %s and was killed", p.pid, sig, grace)
}
