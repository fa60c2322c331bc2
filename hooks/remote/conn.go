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

	"github.com/tandemkit/tandem/hooks/remote/unary"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// Conn is the connection to one hook server endpoint, shared by every hook registered with it. Calls
// are made by a unary.Client, on the calling goroutine: grpc-go's hand-offs to its writer and reader
// goroutines cost a remote hook a third of a round trip more across processes (docs/hooks.md,
// Benchmark). A call finds a live connection or opens one, so a hook server that restarted is reached
// again at once, and one that is away fails the call at once, not at its timeout.
type Conn struct {
	endpoint string
	path     string

	mu     sync.Mutex
	client *unary.Client
	hooks  v1alpha1.RuntimeHookServiceClient // on client
	closed bool
}

// NewConn checks endpoint, a unix socket as an absolute path (as Koordinator's files give it) or a
// unix:// URL. It does not connect: that happens on the first call.
func NewConn(endpoint string) (*Conn, error) {
	path, err := endpointPath(endpoint)
	if err != nil {
		return nil, err
	}
	return &Conn{endpoint: endpoint, path: path}, nil
}

// endpointPath is the path of endpoint's socket.
func endpointPath(endpoint string) (string, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok && strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: hook servers listen on unix sockets; give an absolute socket path or unix:///path", endpoint)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("endpoint %q: the socket path must be absolute, as in unix:///run/my-hook.sock", endpoint)
	}
	return filepath.Clean(path), nil
}

// Endpoint is the endpoint as it was configured, for messages.
func (c *Conn) Endpoint() string { return c.endpoint }

// api returns the service client, creating it on first use.
func (c *Conn) api() (v1alpha1.RuntimeHookServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("connection to hook server %s is closed: its hooks.d file changed or was removed", c.endpoint)
	}
	if c.client == nil {
		c.client = unary.New(c.path)
		c.hooks = v1alpha1.NewRuntimeHookServiceClient(c.client)
	}
	return c.hooks, nil
}

// Close closes the connection; calls still in flight fail.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.client == nil {
		return nil
	}
	return c.client.Close()
}
