package agent

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtimeStopper stops pod sandboxes through the runtime's CRI socket: how tandem-nri evicts while the
// API server cannot be reached (tandem-proxy does it through its own connection).
type runtimeStopper struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

// newRuntimeStopper connects lazily: the runtime need not be up yet.
func newRuntimeStopper(endpoint string) (*runtimeStopper, error) {
	if !strings.HasPrefix(endpoint, "unix://") {
		return nil, fmt.Errorf("runtime-endpoint %q: want unix:///path/to/containerd.sock", endpoint)
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("runtime-endpoint %s: %w", endpoint, err)
	}
	return &runtimeStopper{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// StopPodSandbox stops the sandbox, which stops its containers; containerd tells the plugin.
func (r *runtimeStopper) StopPodSandbox(ctx context.Context, id string) error {
	if _, err := r.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("stop pod sandbox %s through the runtime: %w", id, err)
	}
	return nil
}

// Close closes the connection.
func (r *runtimeStopper) Close() error { return r.conn.Close() }
