package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/floorproxy"
)

// newFloor makes the floor proxy; unaryFastPath lets it relay the CRI's unary methods with one Invoke.
func newFloor(backend string, unaryFastPath bool) (*floorproxy.Proxy, error) {
	var unary []string
	if unaryFastPath {
		unary = floorproxy.UnaryMethods(&runtimeapi.RuntimeService_ServiceDesc, &runtimeapi.ImageService_ServiceDesc)
	}
	return floorproxy.New(backend, maxMsgSize, unary...)
}

// serveFloor is the body of the floor proxy's own process.
func serveFloor(ctx context.Context, listen, backend, pprofSocket string, unaryFastPath bool) error {
	if backend == "" {
		return errors.New("--serve-floor-backend is required with --serve-floor-listen")
	}
	p, err := newFloor(backend, unaryFastPath)
	if err != nil {
		return err
	}
	if err := os.Remove(listen); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale floor socket: %w", err)
	}
	lis, err := net.Listen("unix", listen)
	if err != nil {
		return fmt.Errorf("floor proxy listen: %w", err)
	}
	if pprofSocket != "" {
		// Go's profiles of the floor, to set beside tandem-proxy's (its debug socket serves the same):
		// where the two differ in CPU per call, the profiles say in what.
		plis, err := net.Listen("unix", pprofSocket)
		if err != nil {
			return fmt.Errorf("floor proxy profile socket: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(plis) }()
		defer hs.Close()
	}
	klog.FromContext(ctx).Info("Floor proxy serving", "listen", listen, "backend", backend, "unaryFastPath", unaryFastPath)
	return p.Serve(ctx, lis)
}

// serveFloorInProcess runs the floor proxy in this process, beside the callers, and returns its endpoint
// and how to stop it. The socket is listening when it returns.
func serveFloorInProcess(ctx context.Context, dir, backend string, unaryFastPath bool) (string, func(), error) {
	p, err := newFloor(backend, unaryFastPath)
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

func startFloor(dir, backend string, unaryFastPath bool) (*floorProcess, error) {
	own, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary to start the floor proxy: %w", err)
	}
	// The floor runs from a copy of this executable. Run from the same file, its code would be the very
	// pages the benchmark's callers run (gRPC's transport, the runtime), warm in the CPU's caches at every
	// call, which no proxy on a node enjoys: kubelet and the proxy are different programs. That sharing
	// made the floor about 4 % cheaper per call than its own copy (docs/performance.md).
	exe := filepath.Join(dir, "floor-proxy")
	if err := copyExecutable(own, exe); err != nil {
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
	f.cmd = exec.Command(exe, "--serve-floor-listen", f.Socket, "--serve-floor-backend", backend, "--serve-floor-pprof", f.PprofSocket,
		fmt.Sprintf("--floor-unary=%t", unaryFastPath))
	f.cmd.Stdout, f.cmd.Stderr = log, log
	// Its own process group keeps a terminal's Ctrl-C away from it (the
	// benchmark stops it in order); Pdeathsig stops it if the benchmark dies.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := f.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start floor proxy: %w", err)
	}
	go func() {
		f.err = f.cmd.Wait()
		log.Close()
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
		return fmt.Errorf("floor proxy had already exited: %v: see %s", f.err, f.LogPath)
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
		return fmt.Errorf("copy the benchmark's executable for the floor proxy: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("copy the benchmark's executable for the floor proxy (the run's directory should be new): %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy the benchmark's executable to %s (check the room left under --work-dir): %w", dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy the benchmark's executable to %s (check the room left under --work-dir): %w", dst, err)
	}
	return nil
}
