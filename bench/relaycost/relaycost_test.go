package relaycost

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/bench/floorproxy"
	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/proxy"
)

const maxMsg = 16 << 20

// runtimeServer answers the calls kubelet makes most with fixed data shaped
// like containerd's: a fake, because the point is to leave the runtime's own
// time out of the figures.
type runtimeServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	containers *runtimeapi.ListContainersResponse
}

func newRuntimeServer(n int) *runtimeServer {
	resp := &runtimeapi.ListContainersResponse{}
	for i := range n {
		resp.Containers = append(resp.Containers, &runtimeapi.Container{
			Id:           fmt.Sprintf("%064x", i),
			PodSandboxId: fmt.Sprintf("%064x", i/10+1<<20),
			Metadata:     &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", i%10)},
			Image:        &runtimeapi.ImageSpec{Image: "docker.io/library/tandem-e2e:1"},
			ImageRef:     "sha256:" + fmt.Sprintf("%064x", 42),
			State:        runtimeapi.ContainerState_CONTAINER_RUNNING,
			CreatedAt:    1763700000000000000 + int64(i),
			Labels: map[string]string{
				"io.kubernetes.container.name": fmt.Sprintf("c%d", i%10),
				"io.kubernetes.pod.name":       fmt.Sprintf("bench-%02d", i/10),
				"io.kubernetes.pod.namespace":  "tandem-bench",
				"io.kubernetes.pod.uid":        fmt.Sprintf("%036d", i/10),
			},
			Annotations: map[string]string{"io.kubernetes.container.restartCount": "0"},
		})
	}
	return &runtimeServer{containers: resp}
}

func (*runtimeServer) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1", RuntimeApiVersion: "v1"}, nil
}

func (s *runtimeServer) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return s.containers, nil
}

// ListPodSandbox is what tandem-proxy's start-up recovery asks first.
func (*runtimeServer) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

func listen(b *testing.B, path string) net.Listener {
	b.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	return lis
}

func client(b *testing.B, sock string) runtimeapi.RuntimeServiceClient {
	b.Helper()
	conn, err := grpc.NewClient("unix://"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsg), grpc.MaxCallSendMsgSize(maxMsg)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// BenchmarkRelay times Version and a 100-container ListContainers directly,
// through the floor proxy and through tandem-proxy's server. Compare the
// floor and tandem lines with benchstat over -count runs: one run is at the
// mercy of whatever else the machine does.
func BenchmarkRelay(b *testing.B) {
	// Unix socket paths must stay under 108 bytes; b.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "rc")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	_, ctx := ktesting.NewTestContext(b)
	ctx, cancel := context.WithCancel(ctx)
	b.Cleanup(cancel)

	backendLis := listen(b, filepath.Join(dir, "rt.sock"))
	backend := grpc.NewServer(grpc.MaxRecvMsgSize(maxMsg), grpc.MaxSendMsgSize(maxMsg))
	runtimeapi.RegisterRuntimeServiceServer(backend, newRuntimeServer(100))
	go func() { _ = backend.Serve(backendLis) }()
	b.Cleanup(backend.Stop)
	backendEndpoint := "unix://" + backendLis.Addr().String()

	floor, err := floorproxy.New(backendEndpoint, maxMsg,
		floorproxy.UnaryMethods(&runtimeapi.RuntimeService_ServiceDesc, &runtimeapi.ImageService_ServiceDesc)...)
	if err != nil {
		b.Fatal(err)
	}
	floorLis := listen(b, filepath.Join(dir, "floor.sock"))
	floorDone := make(chan error, 1)
	go func() { floorDone <- floor.Serve(ctx, floorLis) }()

	cfg := proxy.DefaultConfig()
	cfg.Listen = filepath.Join(dir, "tandem.sock")
	cfg.RuntimeEndpoint = backendEndpoint
	cfg.StateDir = filepath.Join(dir, "state")
	tandem, err := proxy.New(cfg, frontend.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	if err := tandem.Recover(ctx); err != nil {
		b.Fatal(err)
	}
	tandemLis := listen(b, cfg.Listen)
	tandemDone := make(chan error, 1)
	go func() { tandemDone <- tandem.Serve(ctx, tandemLis) }()
	b.Cleanup(func() {
		cancel()
		for name, done := range map[string]chan error{"floor": floorDone, "tandem": tandemDone} {
			if err := <-done; err != nil {
				b.Errorf("%s proxy: %v", name, err)
			}
		}
		_ = tandem.Close()
	})

	targets := []struct {
		name string
		c    runtimeapi.RuntimeServiceClient
	}{
		{"direct", client(b, backendLis.Addr().String())},
		{"floor", client(b, floorLis.Addr().String())},
		{"tandem", client(b, tandemLis.Addr().String())},
	}
	calls := []struct {
		name string
		call func(runtimeapi.RuntimeServiceClient) error
	}{
		{"Version", func(c runtimeapi.RuntimeServiceClient) error {
			_, err := c.Version(ctx, &runtimeapi.VersionRequest{Version: "0.1.0"})
			return err
		}},
		{"ListContainers100", func(c runtimeapi.RuntimeServiceClient) error {
			_, err := c.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		}},
	}
	for _, call := range calls {
		for _, t := range targets {
			b.Run(call.name+"/"+t.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if err := call.call(t.c); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
