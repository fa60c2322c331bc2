package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/floorproxy"
)

// serveFloor is the body of the floor proxy's own process when it runs from the benchmark's executable
// (--floor-from-benchmark).
func serveFloor(ctx context.Context, listen, backend, pprofSocket string, unaryFastPath bool) error {
	if backend == "" {
		return errors.New("--serve-floor-backend is required with --serve-floor-listen")
	}
	p, err := floorproxy.NewCRI(backend, unaryFastPath)
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Floor proxy serving", "listen", listen, "backend", backend, "unaryFastPath", unaryFastPath)
	return floorproxy.ServeUnix(ctx, p, listen, pprofSocket)
}

// serveFloorInProcess runs the floor proxy in this process, beside the callers, and returns its endpoint
// and how to stop it. The socket is listening when it returns.
func serveFloorInProcess(ctx context.Context, dir, backend string, unaryFastPath bool) (string, func(), error) {
	p, err := floorproxy.NewCRI(backend, unaryFastPath)
	if err != nil {
		return "", nil, err
	}
	sock := filepath.Join(dir, "floor.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return "", nil, fmt.Errorf("floor proxy listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, lis) }()
	return "unix://" + sock, func() {
		cancel()
		if err := <-done; err != nil {
			klog.FromContext(ctx).Error(err, "In-process floor proxy")
		}
	}, nil
}

// floorProcess is the floor proxy running in a child process, so that it has
// its own scheduler, heap and garbage collector, as tandem-proxy has, instead
// of sharing them with the benchmark's callers.
type floorProcess struct {
	Socket, Endpoint, LogPath string
	// PprofSocket serves Go's profiles of the floor process while it runs.
	PprofSocket string
	cmd         *exec.Cmd
	done        chan struct{}
	err         error
}

// floorPackage is the floor proxy's own program, which the benchmark builds as tandem-proxy is built.
const floorPackage = "./bench/floorproxy/cmd/floor-proxy"

// floorBuild says which executable a floor process runs.
type floorBuild struct {
	// path is the floor-proxy program built from floorPackage, or the benchmark's own executable.
	path string
	// fromBenchmark: path is the benchmark's executable, which serves the floor behind its hidden
	// --serve-floor-* flags.
	fromBenchmark bool
}

// startFloor starts a floor proxy from a copy of build.path in dir. Each floor runs from a file of its
// own: two processes running one file share its pages of code, which are then warm in the CPU's caches
// for each other, and no two proxies on a node share a file. A floor run from the benchmark's own file
// would also share them with the benchmark's callers; that made it about 4 % cheaper per call.
func startFloor(dir, backend string, unaryFastPath bool, build floorBuild, extraWork time.Duration) (*floorProcess, error) {
	if extraWork > 0 && build.fromBenchmark {
		return nil, errors.New("extra work per call needs the floor's own program, not the benchmark's executable")
	}
	exe := filepath.Join(dir, "floor-proxy")
	if err := copyExecutable(build.path, exe); err != nil {
		return nil, err
	}
	f := &floorProcess{
		Socket:      filepath.Join(dir, "floor.sock"),
		LogPath:     filepath.Join(dir, "floor.log"),
		PprofSocket: filepath.Join(dir, "floor-pprof.sock"),
		done:        make(chan struct{}),
	}
	f.Endpoint = "unix://" + f.Socket
	log, err := os.OpenFile(f.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open floor proxy log: %w", err)
	}
	args := []string{"--listen", f.Socket, "--backend", backend, "--pprof-socket", f.PprofSocket, fmt.Sprintf("--unary=%t", unaryFastPath),
		"--extra-work=" + extraWork.String()}
	if build.fromBenchmark {
		args = []string{"--serve-floor-listen", f.Socket, "--serve-floor-backend", backend, "--serve-floor-pprof", f.PprofSocket,
			fmt.Sprintf("--floor-unary=%t", unaryFastPath)}
	}
	f.cmd = exec.Command(exe, args...)
	f.cmd.Stdout, f.cmd.Stderr = log, log
	// Its own process group keeps a terminal's Ctrl-C away from it (the
	// benchmark stops it in order); Pdeathsig stops it if the benchmark dies.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := f.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start floor proxy: %w", errors.Join(err, log.Close()))
	}
	go func() {
		f.err = errors.Join(f.cmd.Wait(), log.Close())
		close(f.done)
	}()
	return f, nil
}

// PID is the floor proxy's process id.
func (f *floorProcess) PID() int { return f.cmd.Process.Pid }

// Exited is closed when the process has ended.
func (f *floorProcess) Exited() <-chan struct{} { return f.done }

// Stop asks the floor proxy to end and kills it if it does not within 10s.
func (f *floorProcess) Stop(ctx context.Context) error {
	select {
	case <-f.done:
		return fmt.Errorf("floor proxy had already exited: %w: see %s", f.err, f.LogPath)
	default:
	}
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case <-f.done:
		if f.err != nil {
			return fmt.Errorf("floor proxy exit: %w: see %s", f.err, f.LogPath)
		}
		return nil
	case <-ctx.Done():
		_ = f.cmd.Process.Kill()
		<-f.done
		return fmt.Errorf("floor proxy ignored SIGTERM and was killed: see %s", f.LogPath)
	}
}

// copyExecutable copies the program at src to dst, executable, so that dst is a file of its own with its
// own page cache. A failed copy leaves nothing at dst.
func copyExecutable(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy the floor proxy's executable: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("copy the floor proxy's executable (the run's directory should be new): %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy the floor proxy's executable to %s (check the room left under --work-dir): %w", dst, errors.Join(err, out.Close()))
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy the floor proxy's executable to %s (check the room left under --work-dir): %w", dst, err)
	}
	return nil
}
