// Package report builds what tandemctl prints: every container on the node with the QoS settings the
// kernel's cgroup files hold beside the ones tandem-proxy last applied, and the CPU pools of the cpuset
// policy. It reads tandem-proxy's debug endpoints (on its root-only debug socket) and the cgroup
// filesystem, and renders tables or JSON.
package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/store"
)

// ErrPoolsOff is returned by Client.Pools when tandem-proxy runs without the cpuset policy.
var ErrPoolsOff = errors.New("tandem-proxy has no CPU pools: its cpuset policy is off")

// Client reads tandem-proxy's debug endpoints: on its debug socket, which only root may connect to,
// or, from a proxy older than that socket, on its --metrics-addr.
type Client struct {
	http *http.Client
	// where names the socket or address in messages; flag is tandemctl's flag that sets it.
	where, flag string
	// tcp: the proxy is reached on its --metrics-addr, where newer proxies serve no debug endpoints.
	tcp bool
}

// NewClient returns a client for the proxy's --debug-socket, a unix socket path.
func NewClient(socket string) *Client { return newClient("unix", socket, "--proxy-debug-socket") }

// NewAddrClient returns a client for a proxy older than --debug-socket, which serves its debug
// endpoints on its --metrics-addr (host:port).
func NewAddrClient(addr string) *Client { return newClient("tcp", addr, "--proxy-addr") }

func newClient(network, address, flag string) *Client {
	// The transport dials the socket or address whatever the URL names.
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}}
	return &Client{http: &http.Client{Transport: tr}, where: address, flag: flag, tcp: network == "tcp"}
}

// Store returns the proxy's store: its pods and containers with what it last applied.
func (c *Client) Store(ctx context.Context) (*store.Snapshot, error) {
	var snap store.Snapshot
	if err := c.get(ctx, "/debug/store", &snap); err != nil {
		return nil, err
	}
	return &snap, nil
}

// PoolsDump is the JSON of the proxy's /debug/pools: CPU lists in the kernel's format, "" for an
// empty pool, and the exclusive allocations keyed by "<podUID>/<container>".
type PoolsDump struct {
	LSE         string                    `json:"lse"`
	LSR         string                    `json:"lsr"`
	LS          string                    `json:"ls"`
	BE          string                    `json:"be"`
	Allocations map[string]AllocationDump `json:"allocations"`
}

// AllocationDump is one exclusive allocation.
type AllocationDump struct {
	Class resqos.Class `json:"class"`
	CPUs  string       `json:"cpus"`
}

// Pools returns the proxy's CPU pools; ErrPoolsOff when its cpuset policy is off.
func (c *Client) Pools(ctx context.Context) (*PoolsDump, error) {
	var p PoolsDump
	if err := c.get(ctx, "/debug/pools", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

func (c *Client) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://tandem-proxy"+path, nil)
	if err != nil {
		return fmt.Errorf("request %s: %w", path, err)
	}
	resp, err := c.http.Do(req)
	switch {
	case err != nil && !c.tcp && errors.Is(err, syscall.EACCES):
		return fmt.Errorf("tandem-proxy's debug socket %s is root's alone: run tandemctl as root: %w", c.where, err)
	case err != nil:
		return fmt.Errorf("tandem-proxy does not answer on %s (is it running? set %s): %w", c.where, c.flag, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read %s from tandem-proxy on %s: %w", path, c.where, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && path == "/debug/pools" && len(body) > 0 && !strings.Contains(string(body), "404 page not found"):
		// The proxy's own 404 explains why; a mux 404 means an older proxy without the endpoint.
		return fmt.Errorf("%w (%s); start it with a CPU topology (--sysfs-root) to get pools", ErrPoolsOff, strings.TrimSpace(string(body)))
	case resp.StatusCode == http.StatusNotFound && c.tcp && path == "/debug/store":
		return fmt.Errorf("tandem-proxy on %s has no %s: it serves its debug endpoints on its --debug-socket, to root alone; set --proxy-debug-socket instead of --proxy-addr", c.where, path)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("tandem-proxy on %s has no %s: upgrade it to the version of this tandemctl", c.where, path)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("tandem-proxy on %s answered %s to %s: %s", c.where, resp.Status, path, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s from tandem-proxy on %s (is %s tandem-proxy's?): %w", path, c.where, c.flag, err)
	}
	return nil
}

// getStatus GETs one of the agent's status endpoints into a new T.
func getStatus[T any](ctx context.Context, c *Client, path string) (*T, error) {
	var s T
	if err := c.get(ctx, path, &s); err != nil {
		return nil, err
	}
	return &s, nil
}
