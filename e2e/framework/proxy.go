package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ProxyOptions configure a tandem-proxy, or a tandem-nri, started by StartProxy.
type ProxyOptions struct {
	Binary          string // path of a built tandem-proxy (BuildProxy), or of tandem-nri (BuildNRI) with NRISocket
	RuntimeEndpoint string
	Dir             string // socket, state dir and log live here
	// Listen overrides the socket path (default Dir/tandem.sock), to start a
	// second proxy on the socket of a first one.
	Listen string
	// NRISocket, when set, is containerd's NRI socket (Containerd.NRISocket) and Binary is tandem-nri,
	// Tandem as an NRI plugin: it connects there instead of listening for kubelet. Kubelet then talks
	// to containerd itself: Proxy.Endpoint is RuntimeEndpoint, so that a test drives either mode
	// through Proxy.Endpoint alike, and Proxy.Socket is empty.
	NRISocket string
	ExtraArgs []string
}

// Proxy is a running tandem-proxy or tandem-nri process.
type Proxy struct {
	// Socket is where the proxy listens for kubelet, and Endpoint the CRI endpoint kubelet uses:
	// "unix://" + Socket, or in NRI mode the runtime's own endpoint (Socket is then empty).
	Socket, Endpoint, StateDir, MetricsAddr string // MetricsAddr is 127.0.0.1:<free port>
	// DebugSocket serves /debug/store and /debug/pools, to root alone.
	DebugSocket string
	LogPath     string

	opts ProxyOptions
	proc *process
}

// StoreDump is the JSON of tandem-proxy's /debug/store.
type StoreDump struct {
	Pods       []StorePod       `json:"pods"`
	Containers []StoreContainer `json:"containers"`
}

// StorePod is one pod of the proxy's store.
type StorePod struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Namespace    string            `json:"namespace"`
	UID          string            `json:"uid"`
	State        string            `json:"state"`
	CgroupParent string            `json:"cgroupParent"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
}

// StoreContainer is one container of the proxy's store.
type StoreContainer struct {
	ID           string          `json:"id"`
	PodSandboxID string          `json:"podSandboxId"`
	Name         string          `json:"name"`
	State        string          `json:"state"`
	Resources    json.RawMessage `json:"resources"`
}

// PoolsDump is the JSON of tandem-proxy's /debug/pools: CPU lists in the kernel's format ("" for an
// empty pool) and the exclusive allocations keyed by "<podUID>/<container>".
type PoolsDump struct {
	LSE         string                `json:"lse"`
	LSR         string                `json:"lsr"`
	LS          string                `json:"ls"`
	BE          string                `json:"be"`
	Allocations map[string]Allocation `json:"allocations"`
}

// Allocation is one exclusive allocation of /debug/pools.
type Allocation struct {
	Class string `json:"class"`
	CPUs  string `json:"cpus"`
	// Container is the id of the container using the CPUs, empty until one starts.
	Container string `json:"container,omitempty"`
}

// freeLocalAddr returns 127.0.0.1:<port> with a port that was free a moment ago.
func freeLocalAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartProxy starts tandem-proxy, logging to Dir/proxy.log, and waits until
// /readyz answers 200: the runtime is reachable through it or, in NRI mode,
// the plugin is registered with containerd and synchronized.
func StartProxy(ctx context.Context, opts ProxyOptions) (*Proxy, error) {
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create proxy dir: %w", err)
	}
	addr, err := freeLocalAddr()
	if err != nil {
		return nil, err
	}
	p := newProxy(opts, addr)
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// newProxy lays out the paths of a proxy with metrics on addr; it starts nothing.
func newProxy(opts ProxyOptions, addr string) *Proxy {
	sock := opts.Listen
	if sock == "" {
		sock = filepath.Join(opts.Dir, "tandem.sock")
	}
	endpoint := "unix://" + sock
	if opts.NRISocket != "" {
		sock, endpoint = "", opts.RuntimeEndpoint
	}
	return &Proxy{
		Socket:      sock,
		Endpoint:    endpoint,
		StateDir:    filepath.Join(opts.Dir, "state"),
		MetricsAddr: addr,
		DebugSocket: filepath.Join(opts.Dir, "state", "debug.sock"),
		LogPath:     filepath.Join(opts.Dir, "proxy.log"),
		opts:        opts,
	}
}

// Args are the command-line arguments the proxy runs with.
func (p *Proxy) Args() []string {
	args := []string{"--listen", p.Socket}
	if p.opts.NRISocket != "" {
		args = []string{"--nri-socket", p.opts.NRISocket}
	}
	args = append(args,
		"--runtime-endpoint", p.opts.RuntimeEndpoint,
		"--state-dir", p.StateDir,
		"--metrics-addr", p.MetricsAddr,
		"--debug-socket", p.DebugSocket,
		"-v", "2",
	)
	return append(args, p.opts.ExtraArgs...)
}

func (p *Proxy) start(ctx context.Context) error {
	proc, err := startProcess(p.opts.Binary, p.Args(), os.Environ(), p.LogPath)
	if err != nil {
		return err
	}
	p.proc = proc
	if err := os.WriteFile(filepath.Join(p.opts.Dir, "proxy.pid"), []byte(strconv.Itoa(proc.pid)), 0o644); err != nil {
		return fmt.Errorf("write proxy pid file: %w", err)
	}
	if err := p.WaitReady(ctx, 30*time.Second); err != nil {
		// Not ready is a failed start: leave no process behind for the caller to find.
		if p.proc.running() {
			_ = p.proc.stop(context.WithoutCancel(ctx), syscall.SIGKILL, 5*time.Second)
		}
		return err
	}
	return nil
}

// WaitReady polls /readyz until it answers 200, the proxy exits, or timeout.
func (p *Proxy) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if !p.proc.running() {
			b, _ := os.ReadFile(p.LogPath)
			return fmt.Errorf("tandem-proxy exited with code %d during start: see %s: %s", p.proc.exitCode(), p.LogPath, tail(b, 1500))
		}
		code, _, err := p.get(ctx, "/readyz")
		if err == nil && code == http.StatusOK {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("/readyz answered %d", code)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("tandem-proxy did not become ready (last: %w): see %s: %w", last, p.LogPath, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PID returns the proxy's process id, or 0 when it is not running.
func (p *Proxy) PID() int {
	if !p.proc.running() {
		return 0
	}
	return p.proc.pid
}

// Stop sends SIGTERM and waits (SIGKILL after 30s) and returns the exit code.
func (p *Proxy) Stop(ctx context.Context) (int, error) {
	if !p.proc.running() {
		return p.proc.exitCode(), nil
	}
	if err := p.proc.stop(ctx, syscall.SIGTERM, 30*time.Second); err != nil {
		return p.proc.exitCode(), err
	}
	return p.proc.exitCode(), nil
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proxy) Kill() error {
	return p.proc.kill(10 * time.Second)
}

// Restart starts the proxy again with the same options, socket and metrics
// address (stopping it first if it still runs) and waits until it is ready.
func (p *Proxy) Restart(ctx context.Context) error {
	if p.proc.running() {
		if _, err := p.Stop(ctx); err != nil {
			return err
		}
	}
	return p.start(ctx)
}

// Store returns the proxy's /debug/store, read on its debug socket.
func (p *Proxy) Store(ctx context.Context) (*StoreDump, error) {
	code, body, err := getOn(ctx, "unix", p.DebugSocket, "/debug/store")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/debug/store answered %d: %s", code, tail(body, 500))
	}
	var d StoreDump
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("decode /debug/store: %w", err)
	}
	return &d, nil
}

// Pools returns the proxy's /debug/pools, read on its debug socket.
func (p *Proxy) Pools(ctx context.Context) (*PoolsDump, error) {
	code, body, err := getOn(ctx, "unix", p.DebugSocket, "/debug/pools")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/debug/pools answered %d: %s", code, tail(body, 500))
	}
	var d PoolsDump
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("decode /debug/pools: %w", err)
	}
	return &d, nil
}

// Metrics returns the proxy's /metrics text.
func (p *Proxy) Metrics(ctx context.Context) (string, error) {
	code, body, err := p.get(ctx, "/metrics")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("/metrics answered %d", code)
	}
	return string(body), nil
}

// Get fetches path from the proxy's metrics address and returns status and body.
func (p *Proxy) Get(ctx context.Context, path string) (int, []byte, error) {
	return p.get(ctx, path)
}

// GetDebug fetches path from the proxy's debug socket and returns status and body.
func (p *Proxy) GetDebug(ctx context.Context, path string) (int, []byte, error) {
	return getOn(ctx, "unix", p.DebugSocket, path)
}

func (p *Proxy) get(ctx context.Context, path string) (int, []byte, error) {
	return getOn(ctx, "tcp", p.MetricsAddr, path)
}

// getOn GETs path from an HTTP server on network and address (tcp host:port, or a unix socket).
func getOn(ctx context.Context, network, address, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	// The host is a name only: the transport dials address.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://tandem-proxy"+path, nil)
	if err != nil {
		return 0, nil, err
	}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("get %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return resp.StatusCode, body, nil
}

// AttachProxy returns the proxy that an earlier StartProxy left running in
// dir, so that Stop can end it.
func AttachProxy(dir string) (*Proxy, error) {
	b, err := os.ReadFile(filepath.Join(dir, "proxy.pid"))
	if err != nil {
		return nil, fmt.Errorf("read proxy pid file: %w", err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		return nil, fmt.Errorf("parse proxy pid file: %w", err)
	}
	proc, err := findProcess(pid)
	if err != nil {
		return nil, err
	}
	return &Proxy{opts: ProxyOptions{Dir: dir}, proc: proc, LogPath: filepath.Join(dir, "proxy.log")}, nil
}
