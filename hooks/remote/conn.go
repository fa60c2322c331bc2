// Package remote calls hook servers: gRPC services on unix sockets that speak Koordinator's runtime hook
// protocol (runtime.v1alpha1.RuntimeHookService), so koordlet and other servers written for
// koord-runtime-proxy work with Tandem unchanged.
//
// A Client is a hooks.Hook: the dispatcher runs it like an in-process hook, under the timeout and failure
// policy of its registration. Hook servers are registered by JSON files in a directory (hooks.d); the
// Loader reads it into hooks.Registrations and the Watcher reloads it on every change.
package remote

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// maxReconnectDelay bounds gRPC's reconnect backoff. A restarted hook server is on a local socket and
// comes back within a second or so; the default two minutes would fail calls long after it returned.
const maxReconnectDelay = time.Second

// localWindow is the HTTP/2 flow-control window toward a hook server: hook messages are kilobytes.
const localWindow = 1 << 20

// Conn is the connection to one hook server endpoint, shared by every hook registered with it. gRPC
// reconnects by itself when the server returns; calls fail fast while it is away, so a dead server
// costs one failed call, not a timeout.
type Conn struct {
	endpoint string
	target   string

	mu     sync.Mutex
	cc     *grpc.ClientConn
	closed bool
}

// NewConn checks endpoint, a unix socket as an absolute path (as Koordinator's files give it) or a
// unix:// URL. It does not connect: that happens on the first call.
func NewConn(endpoint string) (*Conn, error) {
	target, err := socketTarget(endpoint)
	if err != nil {
		return nil, err
	}
	return &Conn{endpoint: endpoint, target: target}, nil
}

// socketTarget turns an endpoint into the gRPC target of its socket.
func socketTarget(endpoint string) (string, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok && strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: hook servers listen on unix sockets; give an absolute socket path or unix:///path", endpoint)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("endpoint %q: the socket path must be absolute, as in unix:///run/my-hook.sock", endpoint)
	}
	return "unix://" + filepath.Clean(path), nil
}

// Endpoint is the endpoint as it was configured, for messages.
func (c *Conn) Endpoint() string { return c.endpoint }

// api returns the service client, creating the gRPC channel on first use.
func (c *Conn) api() (v1alpha1.RuntimeHookServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("connection to hook server %s is closed: its hooks.d file changed or was removed", c.endpoint)
	}
	if c.cc == nil {
		cc, err := grpc.NewClient(c.target,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			// A fixed window: grpc-go's bandwidth estimation would ping the hook server after every answer,
			// one more write and wake-up per call for a window a local socket never needs to grow.
			grpc.WithStaticStreamWindowSize(localWindow),
			grpc.WithStaticConnWindowSize(localWindow),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: maxReconnectDelay},
				MinConnectTimeout: time.Second,
			}))
		if err != nil {
			return nil, fmt.Errorf("hook server %s: %w", c.endpoint, err)
		}
		c.cc = cc
	}
	return v1alpha1.NewRuntimeHookServiceClient(c.cc), nil
}

// Close closes the connection; calls still in flight fail.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cc == nil {
		return nil
	}
	return c.cc.Close()
}
