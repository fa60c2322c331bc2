package proxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2"
)

// Listen opens the CRI socket safely: it creates the parent directory, removes a stale socket left by a
// crash, refuses to take over a socket on which a live server answers, and sets the socket's mode and
// owner (by default the owner of the runtime's socket, so whoever may talk to containerd may talk to
// Tandem, and nobody else).
func Listen(ctx context.Context, cfg Config) (net.Listener, error) {
	logger := klog.FromContext(ctx)
	path := cfg.Listen
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket directory for --listen %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("--listen %s exists and is not a socket; move it away or choose another path: %w", path, errdefs.ErrAlreadyExists)
		}
		d := net.Dialer{Timeout: time.Second}
		if conn, err := d.DialContext(ctx, "unix", path); err == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("a server already answers on %s (another tandem-proxy?); stop it or choose another --listen: %w", path, errdefs.ErrAlreadyExists)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
		logger.Info("Removed stale socket", "path", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("inspect --listen %s: %w", path, err)
	}

	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := secureSocket(ctx, cfg, path); err != nil {
		_ = lis.Close()
		return nil, err
	}
	return lis, nil
}

func secureSocket(ctx context.Context, cfg Config, path string) error {
	if err := os.Chmod(path, fs.FileMode(cfg.SocketMode)); err != nil {
		return fmt.Errorf("set mode %#o on %s: %w", cfg.SocketMode, path, err)
	}
	uid, gid := -1, -1
	if cfg.SocketOwner != "" {
		var err error
		if uid, gid, err = parseOwner(cfg.SocketOwner); err != nil {
			return fmt.Errorf("--socket-owner: %w", err)
		}
	} else {
		rpath, _ := socketPath(cfg.RuntimeEndpoint)
		fi, err := os.Stat(rpath)
		if err != nil {
			klog.FromContext(ctx).Info("Runtime socket not found; listen socket keeps the proxy's own owner (set --socket-owner to choose)", "runtimeSocket", rpath)
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return fmt.Errorf("set owner %d:%d on %s: %w", uid, gid, path, err)
	}
	return nil
}

// parseOwner parses "uid:gid" (numeric ids, as in a systemd unit where names may not resolve yet).
func parseOwner(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want numeric uid:gid, e.g. 0:0: %w", s, errdefs.ErrInvalidArgument)
	}
	if uid, err = strconv.Atoi(u); err != nil || uid < 0 {
		return 0, 0, fmt.Errorf("%q: uid %q is not a non-negative number: %w", s, u, errdefs.ErrInvalidArgument)
	}
	if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
		return 0, 0, fmt.Errorf("%q: gid %q is not a non-negative number: %w", s, g, errdefs.ErrInvalidArgument)
	}
	return uid, gid, nil
}
