package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/internal/supervise"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
)

// statusHandler serves a loop's status as indented JSON, for tandemctl.
func statusHandler(status func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
}

// metricsMux serves what any local user, or Prometheus over the network, may read.
func metricsMux(fe FrontEnd, reg *prometheus.Registry, loops *supervise.Group) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Healthy while every node loop runs: the CRI path does not depend on them, but colocation does.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := loops.Check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := fe.Ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// debugMux serves what only root may read: the store holds every pod's labels and annotations, and
// annotations carry secrets (kubectl apply's last-applied-configuration holds a whole Secret's data).
func debugMux(fe FrontEnd, cpus *alloc.Allocator) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/store", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(fe.Store().Snapshot())
	})
	mux.HandleFunc("/debug/pools", func(w http.ResponseWriter, _ *http.Request) {
		if cpus == nil {
			http.Error(w, "the cpuset policy is off: no CPU topology", http.StatusNotFound)
			return
		}
		p := cpus.Pools()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{
			"lse": p.LSE.String(), "lsr": p.LSR.String(), "ls": p.LS.String(), "be": p.BE.String(),
			"allocations": cpus.Allocations(),
		})
	})
	// Go's profiles, so that what the proxy costs a node can be profiled where it runs (go tool pprof
	// against this socket, docs/performance.md). Root's alone like the rest: a profile shows call paths.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveHTTP serves h on lis until the returned func shuts it down, which also closes lis (and removes
// a unix socket).
func serveHTTP(ctx context.Context, lis net.Listener, h http.Handler) func() {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server stopped", "addr", lis.Addr().String())
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
}

// debugSocketName is the debug socket's name in the state dir, unless --debug-socket says otherwise.
const debugSocketName = "debug.sock"

// listenDebug listens on the debug socket, which only root can connect to: mode 0600, owned by the
// proxy's user, in a directory made 0700 when the proxy creates it. That is how containerd serves its
// debug socket and kubelet its pod-resources socket; a unix socket's permissions are the one check
// that costs no authentication code and cannot be reached from the network. A socket left by a proxy
// that was killed is replaced; one another process answers on is refused.
func listenDebug(ctx context.Context, path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the directory of --debug-socket %s: %w", path, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("inspect the directory of --debug-socket %s: %w", path, err)
	}
	// Whoever can write the directory can put a socket of theirs in the proxy's place.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && ((st.Uid != 0 && int(st.Uid) != os.Geteuid()) || st.Mode&0o022 != 0) {
		return nil, fmt.Errorf("--debug-socket %s: its directory is owned by uid %d with mode %04o, so others could serve in its place; chown root and chmod go-w %s, or choose another --debug-socket",
			path, st.Uid, st.Mode&0o7777, dir)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("--debug-socket %s exists and is not a socket; move it away or choose another --debug-socket", path)
		}
		d := net.Dialer{Timeout: time.Second}
		if conn, err := d.DialContext(ctx, "unix", path); err == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("another tandem-proxy answers on --debug-socket %s; stop it, or give each proxy its own --state-dir", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove the stale --debug-socket %s: %w", path, err)
		}
		klog.FromContext(ctx).Info("Removed a stale debug socket", "socket", path)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on --debug-socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("make --debug-socket %s root's alone: %w", path, err)
	}
	return lis, nil
}
