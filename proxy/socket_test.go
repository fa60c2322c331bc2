package proxy

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2/ktesting"
)

func TestListen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		wantErr func(error) bool
	}{
		{name: "creates the parent directory", prepare: func(*testing.T, string) {}},
		{name: "removes a stale socket", prepare: func(t *testing.T, path string) {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			// Leave the file behind, as a crashed process would.
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			_ = l.Close()
		}},
		{name: "refuses a socket a live server answers on", prepare: func(t *testing.T, path string) {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
		}, wantErr: errdefs.IsAlreadyExists},
		{name: "refuses a path that is not a socket", prepare: func(t *testing.T, path string) {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: errdefs.IsAlreadyExists},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			dir := t.TempDir()
			cfg := DefaultConfig()
			cfg.Listen = filepath.Join(dir, "sub", "tandem.sock")
			cfg.RuntimeEndpoint = "unix://" + filepath.Join(dir, "missing.sock")
			cfg.SocketOwner = strings.Join([]string{itoa(os.Getuid()), itoa(os.Getgid())}, ":")
			tt.prepare(t, cfg.Listen)
			lis, err := Listen(ctx, cfg)
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Fatalf("Listen = %v, want a classed error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			fi, err := os.Stat(cfg.Listen)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o660 {
				t.Fatalf("socket mode = %v, want 0660", fi.Mode().Perm())
			}
			conn, err := net.Dial("unix", cfg.Listen)
			if err != nil {
				t.Fatalf("socket does not accept: %v", err)
			}
			_ = conn.Close()
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string // substring naming the field; empty for valid
	}{
		{name: "defaults are valid", mutate: func(*Config) {}},
		{name: "bare path endpoint", mutate: func(c *Config) { c.RuntimeEndpoint = "/run/containerd/containerd.sock" }},
		{name: "tcp endpoint", mutate: func(c *Config) { c.RuntimeEndpoint = "tcp://1.2.3.4:5" }, want: "runtime-endpoint"},
		{name: "relative unix path", mutate: func(c *Config) { c.ImageEndpoint = "unix://relative.sock" }, want: "image-endpoint"},
		{name: "small messages", mutate: func(c *Config) { c.MaxMsgSize = 4 << 20 }, want: "max-msg-size"},
		{name: "bad owner", mutate: func(c *Config) { c.SocketOwner = "root" }, want: "socket-owner"},
		{name: "mode bits", mutate: func(c *Config) { c.SocketMode = 0o4777 }, want: "socket-mode"},
		{name: "no listen", mutate: func(c *Config) { c.Listen = "" }, want: "listen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}
