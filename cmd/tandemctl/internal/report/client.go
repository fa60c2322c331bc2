// Package report builds what tandemctl prints: every container on the node with the QoS settings the
// kernel's cgroup files hold beside the ones tandem-proxy last applied, and the CPU pools of the cpuset
// policy. It reads tandem-proxy's debug endpoints and the cgroup filesystem, and renders tables or JSON.
package report

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tandemkit/tandem/proxy/store"
)

// ErrPoolsOff is returned by Client.Pools when tandem-proxy runs without the cpuset policy.
var ErrPoolsOff = errors.New("tandem-proxy has no CPU pools: its cpuset policy is off")

// Client reads tandem-proxy's debug endpoints on its --metrics-addr.
type Client struct {
	addr string
	http *http.Client
}

// NewClient returns a client for the proxy listening on addr (host:port).
func NewClient(addr string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{addr: addr, http: hc}
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
	Class string `json:"class"`
	CPUs  string `json:"cpus"`
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
	url := "http://" + c.addr + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("proxy address %q: want host:port: %w", c.addr, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("tandem-proxy does not answer on %s (is it running? set --proxy-addr): %w", c.addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read %s from tandem-proxy on %s: %w", path, c.addr, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && path == "/debug/pools" && len(body) > 0 && !strings.Contains(string(body), "404 page not found"):
		// The proxy's own 404 explains why; a mux 404 means an older proxy without the endpoint.
		return fmt.Errorf("%w (%s); start it with a CPU topology (--sysfs-root) to get pools", ErrPoolsOff, strings.TrimSpace(string(body)))
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("tandem-proxy on %s has no %s: upgrade it to the version of this tandemctl", c.addr, path)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("tandem-proxy on %s answered %s to %s: %s", c.addr, resp.Status, path, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("decode %s from tandem-proxy on %s (is --proxy-addr the proxy's --metrics-addr?): %w", path, c.addr, err)
	}
	return nil
}
