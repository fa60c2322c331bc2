//go:build !race

// The race detector multiplies memory use; the figure is meaningful without it only.

package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/internal/polltest"
)

// memoryChildEnv names the directory a child test process serves the proxy in.
const memoryChildEnv = "TANDEM_PROXY_MEMORY_CHILD"

// TestProxyMemoryUnderLargeCreates sends 30 concurrent 16 MB CreateContainers through a proxy running in
// a process of its own, in front of a runtime that takes 200 ms per container as containerd does, and
// checks the proxy's peak RSS. The runtime and the client live in this process and never decode the
// large requests, so the figure is the proxy's alone.
func TestProxyMemoryUnderLargeCreates(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 480 MB through a proxy process")
	}
	t.Parallel()
	const (
		calls   = 30
		envSize = 16_000_000
		// What the proxy may peak at: its own ~30 MB, and a bounded number of large requests in
		// flight, each held a few times over (received, decoded, re-encoded) and twice that again
		// before the garbage collector runs.
		maxPeak = 450 << 20
	)
	dir := t.TempDir()
	rtSock := filepath.Join(dir, "rt.sock")
	startSlowRuntime(t, rtSock, 200*time.Millisecond)

	child := exec.Command(os.Args[0], "-test.run=^TestMemoryChildProxy$", "-test.v")
	child.Env = append(os.Environ(), memoryChildEnv+"="+dir)
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "child.log"))
	if err != nil {
		t.Fatal(err)
	}
	child.Stdout, child.Stderr = out, out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = child.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("proxy process output:\n%s", b)
		}
	})
	sock := filepath.Join(dir, "tandem.sock")
	conn := dialUnix(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs := runtimeapi.NewRuntimeServiceClient(conn)
	var pod *runtimeapi.RunPodSandboxResponse
	polltest.Within(t, 2*time.Minute, "the proxy process to serve", func() bool {
		pod, err = rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podConfig("big", nil)})
		return status.Code(err) != codes.Unavailable || ctx.Err() != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before := int64(procStatus(t, child.Process.Pid).VmRSS)

	cfg := ctrConfig("big")
	cfg.Envs = []*runtimeapi.KeyValue{{Key: "BIG", Value: []byte(strings.Repeat("x", envSize))}}
	wire, err := proto.Marshal(&runtimeapi.CreateContainerRequest{PodSandboxId: pod.PodSandboxId, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCodec()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			// Every call sends the same bytes: the client holds them once.
			in := frame{data: mem.BufferSlice{mem.SliceBuffer(wire)}}
			var resp frame
			err := conn.Invoke(ctx, "/runtime.v1.RuntimeService/CreateContainer", &in, &resp, grpc.ForceCodecV2(c))
			if resp.data != nil {
				resp.free()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("CreateContainer: %v", err)
		}
	}
	peak := int64(procStatus(t, child.Process.Pid).VmHWM)
	t.Logf("proxy RSS before: %d MiB, peak with %d concurrent %d-byte CreateContainers: %d MiB", before>>20, calls, len(wire), peak>>20)
	if peak > maxPeak {
		t.Fatalf("proxy peaked at %d MiB of RSS, want at most %d MiB", peak>>20, maxPeak>>20)
	}
}

// TestMemoryChildProxy is the proxy process of TestProxyMemoryUnderLargeCreates; it serves until its
// standard input closes.
func TestMemoryChildProxy(t *testing.T) {
	dir := os.Getenv(memoryChildEnv)
	if dir == "" {
		t.Skip("runs as the child of TestProxyMemoryUnderLargeCreates")
	}
	cfg := DefaultConfig()
	cfg.Listen = filepath.Join(dir, "tandem.sock")
	cfg.RuntimeEndpoint = "unix://" + filepath.Join(dir, "rt.sock")
	cfg.StateDir = filepath.Join(dir, "state")
	_, ctx := ktesting.NewTestContext(t)
	d, err := hooks.NewDispatcher(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, frontend.Deps{Hooks: d})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	lis, err := Listen(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	if err := srv.Serve(ctx, lis); err != nil {
		t.Fatal(err)
	}
	_ = srv.Close()
}

// startSlowRuntime serves a runtime that reads every request as raw bytes, never decoding it, and answers
// after delay. It knows RunPodSandbox and CreateContainer, and lists nothing.
func startSlowRuntime(t *testing.T, sock string, delay time.Duration) {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newCodec()
	var next atomic.Int64
	handler := func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var in frame
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		in.free()
		name := method[strings.LastIndexByte(method, '/')+1:]
		switch name {
		case "RunPodSandbox":
			return stream.SendMsg(&runtimeapi.RunPodSandboxResponse{PodSandboxId: "pod-1"})
		case "CreateContainer":
			// A runtime that takes its time over each container, so that large creates pile up in the
			// proxy: the time must pass, there is nothing to wait for.
			time.Sleep(delay)
			return stream.SendMsg(&runtimeapi.CreateContainerResponse{ContainerId: fmt.Sprintf("ctr-%d", next.Add(1))})
		case "ListPodSandbox":
			return stream.SendMsg(&runtimeapi.ListPodSandboxResponse{})
		case "ListContainers":
			return stream.SendMsg(&runtimeapi.ListContainersResponse{})
		case "Version":
			return stream.SendMsg(&runtimeapi.VersionResponse{RuntimeName: "slow"})
		}
		return status.Errorf(codes.Unimplemented, "%s", method)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(c), grpc.UnknownServiceHandler(handler), grpc.MaxRecvMsgSize(16<<20))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
}

// procStatus reads /proc/<pid>/status (VmRSS, VmHWM in bytes).
func procStatus(t *testing.T, pid int) procfs.ProcStatus {
	t.Helper()
	proc, err := procfs.NewProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	st, err := proc.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
