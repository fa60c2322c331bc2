package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/e2e/framework"
)

// TestDebugEndpointsRootOnly starts tandem-proxy as a node runs it, in front of a real containerd, with
// a socket a SIGKILLed proxy left where the debug socket goes, and reads its endpoints as root and as
// nobody (uid 65534), each from a process of its own. The store holds every pod's annotations, secrets
// among them: only root may read it or the pools, on the debug socket, and the metrics address serves
// metrics and health alone, to anyone.
func TestDebugEndpointsRootOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs a private containerd and reads as another user: needs root")
	}
	_, ctx := ktesting.NewTestContext(t)
	dir, runtimeEndpoint := privateContainerd(t, ctx)
	// Others may enter it, so that only the proxy's own permissions keep them out.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The default place: beside the checkpoint, in startRun's state dir.
	state := filepath.Join(dir, "s")
	debugSocket := filepath.Join(state, "debug.sock")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	leaveStaleSocket(t, debugSocket)
	metricsAddr := freeAddr(t)
	_, stop := startRun(t, ctx, dir, runtimeEndpoint, "--metrics-addr", metricsAddr)

	getter := getterBinary(t)
	tests := []struct {
		name    string
		uid     int
		network string // unix: the debug socket; tcp: the metrics address
		path    string
		want    string // the answer's first line, or the start of its error
	}{
		{name: "root reads the store on the debug socket", uid: 0, network: "unix", path: "/debug/store", want: "200"},
		{name: "root reads the pools on the debug socket", uid: 0, network: "unix", path: "/debug/pools", want: "200"},
		{name: "root reads a heap profile on the debug socket", uid: 0, network: "unix", path: "/debug/pprof/heap?debug=1", want: "200"},
		{name: "nobody cannot connect to the debug socket", uid: nobody, network: "unix", path: "/debug/store", want: "error: permission denied"},
		{name: "no profiles on the metrics address", uid: nobody, network: "tcp", path: "/debug/pprof/heap", want: "404"},
		{name: "no store on the metrics address", uid: nobody, network: "tcp", path: "/debug/store", want: "404"},
		{name: "no pools on the metrics address", uid: nobody, network: "tcp", path: "/debug/pools", want: "404"},
		{name: "nobody reads the metrics", uid: nobody, network: "tcp", path: "/metrics", want: "200"},
		{name: "nobody reads readiness", uid: nobody, network: "tcp", path: "/readyz", want: "200"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			address := map[string]string{"unix": debugSocket, "tcp": metricsAddr}[tt.network]
			got, body := getAs(t, getter, tt.uid, tt.network, address, tt.path)
			if !strings.HasPrefix(got, tt.want) {
				t.Errorf("GET %s on %s as uid %d: %s, want %s\n%s", tt.path, address, tt.uid, got, tt.want, body)
			}
			if strings.HasPrefix(tt.path, "/debug/pprof/heap") && got == "200" && !strings.Contains(body, "heap profile") {
				t.Errorf("GET %s answered %.200q, want a heap profile", tt.path, body)
			}
			if tt.path == "/debug/store" && got == "200" && !strings.Contains(body, `"pods"`) {
				t.Errorf("GET /debug/store answered %q, want the store", body)
			}
		})
	}
	if fi, err := os.Stat(debugSocket); err != nil {
		t.Error(err)
	} else if fi.Mode() != fs.ModeSocket|0o600 {
		t.Errorf("%s has mode %v, want a socket with mode 0600", debugSocket, fi.Mode())
	}
	if err := stop(); err != nil {
		t.Fatalf("tandem-proxy stopped with %v, want a clean stop", err)
	}
	if _, err := os.Lstat(debugSocket); err == nil {
		t.Errorf("%s is still there after the proxy stopped", debugSocket)
	}
}

// nobody is the uid and gid of an unprivileged user.
const nobody = 65534

// leaveStaleSocket leaves a socket file at path that nothing answers on, as a proxy killed with
// SIGKILL does.
func leaveStaleSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
}

// freeAddr returns 127.0.0.1:<port> with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// getterBinary copies this test binary where any user may run it: go test keeps it in a directory
// only its user can enter.
func getterBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := framework.OpenTempDir("tp-get")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "get.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// getAs GETs path from address as uid, in a process of its own running TestGetHelper, and returns
// the status code (or "error: " and the connection error) and the body.
func getAs(t *testing.T, bin string, uid int, network, address, path string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestGetHelper$")
	cmd.Env = []string{"TANDEM_TEST_GET=" + network + " " + address + " " + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run the getter as uid %d: %v: %s", uid, err, out)
	}
	first, rest, _ := strings.Cut(string(out), "\n")
	return first, rest
}

// TestGetHelper is the process getAs runs: it GETs what TANDEM_TEST_GET names and prints the status
// (or the error) on its first line, then the body.
func TestGetHelper(t *testing.T) {
	spec := os.Getenv("TANDEM_TEST_GET")
	if spec == "" {
		t.Skip("run by TestDebugEndpointsRootOnly, as another user")
	}
	var network, address, path string
	if _, err := fmt.Sscan(spec, &network, &address, &path); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, address)
		},
	}}
	w := bufio.NewWriter(os.Stdout)
	defer func() { _ = w.Flush() }()
	resp, err := client.Get("http://tandem-proxy" + path)
	if err != nil {
		reason := err.Error()
		switch {
		case errors.Is(err, syscall.EACCES):
			reason = "permission denied"
		case errors.Is(err, syscall.ECONNREFUSED):
			reason = "connection refused"
		}
		fmt.Fprintf(w, "error: %s\n%v\n", reason, err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Fprintf(w, "%d\n%s", resp.StatusCode, body)
}

// TestListenDebug: the debug socket is made root's alone wherever it goes, replaces a socket a killed
// proxy left, and is refused where others could put a socket of theirs in its place or another proxy
// answers.
func TestListenDebug(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string)
		wantErr string
	}{
		{name: "directory created 0700", prepare: func(*testing.T, string) {}},
		{name: "stale socket replaced", prepare: func(t *testing.T, path string) {
			mkdirMode(t, filepath.Dir(path), 0o700)
			leaveStaleSocket(t, path)
		}},
		{name: "directory others can write", prepare: func(t *testing.T, path string) { mkdirMode(t, filepath.Dir(path), 0o777) },
			wantErr: "chmod go-w"},
		{name: "a file in the way", prepare: func(t *testing.T, path string) {
			mkdirMode(t, filepath.Dir(path), 0o700)
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "is not a socket"},
		{name: "another proxy answers", prepare: func(t *testing.T, path string) {
			mkdirMode(t, filepath.Dir(path), 0o700)
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
		}, wantErr: "another tandem-proxy answers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			path := filepath.Join(t.TempDir(), "state", "debug.sock")
			tt.prepare(t, path)
			lis, err := listenDebug(ctx, path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("listenDebug = %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for p, want := range map[string]fs.FileMode{path: fs.ModeSocket | 0o600, filepath.Dir(path): fs.ModeDir | 0o700} {
				if fi, err := os.Stat(p); err != nil {
					t.Error(err)
				} else if fi.Mode() != want {
					t.Errorf("%s has mode %v, want %v", p, fi.Mode(), want)
				}
			}
			if err := lis.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(path); err == nil {
				t.Errorf("%s is still there once closed", path)
			}
		})
	}
}

// mkdirMode makes dir with exactly mode, whatever the umask.
func mkdirMode(t *testing.T, dir string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}
