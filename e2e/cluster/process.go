package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// daemon is one process of the cluster, described fully by its fields so
// that any process (cluster-up, a test, cluster-down) can start, find and stop
// it: the pid lives in a file, the arguments in the cluster's state.
type daemon struct {
	Name string   `json:"name"`
	Bin  string   `json:"bin"`
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"` // added to the environment
	Log  string   `json:"log"`
	PID  string   `json:"pidFile"`
	// Ready, when set, is a URL that answers 200 once the daemon serves.
	Ready string `json:"ready,omitempty"`
}

// start runs the daemon in its own process group (a Ctrl-C in the terminal
// reaches only the command that started it) with output appended to its log.
func (d *daemon) start() error {
	if pid := d.pid(); pid != 0 {
		return fmt.Errorf("%s runs already as pid %d: stop it first", d.Name, pid)
	}
	log, err := os.OpenFile(d.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", d.Name, err)
	}
	defer log.Close()
	cmd := exec.Command(d.Bin, d.Args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), d.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.Name, err)
	}
	// Reap it if it dies while we run; once we exit, init does.
	go cmd.Wait() //nolint:errcheck // the exit is seen through pid()
	if err := os.WriteFile(d.PID, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return fmt.Errorf("write pid file of %s: %w", d.Name, err)
	}
	return nil
}

// pid returns the daemon's pid when it is alive, else 0. The pid must still
// run d.Bin, so that a recycled pid is never signalled.
func (d *daemon) pid() int {
	b, err := os.ReadFile(d.PID)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !alive(pid) {
		return 0
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0
	}
	if filepath.Clean(strings.TrimSuffix(exe, " (deleted)")) != filepath.Clean(d.Bin) {
		return 0
	}
	return pid
}

// stop sends sig, waits up to grace, then SIGKILLs and waits for the exit.
func (d *daemon) stop(ctx context.Context, sig syscall.Signal, grace time.Duration) error {
	pid := d.pid()
	if pid == 0 {
		return nil
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s (pid %d): %w", d.Name, pid, err)
	}
	if waitGone(ctx, pid, grace) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", d.Name, pid, err)
	}
	if !waitGone(ctx, pid, 10*time.Second) {
		return fmt.Errorf("%s (pid %d) survived SIGKILL for 10s", d.Name, pid)
	}
	return nil
}

func waitGone(ctx context.Context, pid int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for alive(pid) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
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
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// logTail returns the end of the daemon's log for error messages.
func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.Log)
	return tail(b, 2000)
}
