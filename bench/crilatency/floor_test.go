package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

func TestCopyExecutable(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	content := bytes.Repeat([]byte("\x7fELF floor "), 10000)
	if err := os.WriteFile(src, content, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		src     string // the benchmark's executable when empty
		dst     string
		wantErr bool
	}{
		{name: "fresh file", dst: filepath.Join(dir, "floor-proxy")},
		// A leftover copy is never overwritten: the run's directory is new, so one would mean a second
		// floor started in the same place.
		{name: "existing file", dst: src, wantErr: true},
		{name: "missing directory", dst: filepath.Join(dir, "nope", "floor-proxy"), wantErr: true},
		{name: "source missing", src: filepath.Join(dir, "absent"), dst: filepath.Join(dir, "copy-of-nothing"), wantErr: true},
		// Opening a directory succeeds and reading it fails: the copy is created, then removed.
		{name: "source unreadable", src: dir, dst: filepath.Join(dir, "half-copy"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := tc.src
			if from == "" {
				from = src
			}
			err := copyExecutable(from, tc.dst)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("copyExecutable(%s) = nil, want an error", tc.dst)
				}
				if tc.dst == src {
					// The file already there is left as it was.
					if got, rerr := os.ReadFile(src); rerr != nil || !bytes.Equal(got, content) {
						t.Errorf("a refused copy changed %s (%d bytes, read error %v)", src, len(got), rerr)
					}
				} else if _, serr := os.Stat(tc.dst); !os.IsNotExist(serr) {
					t.Errorf("a failed copy left %s behind (stat: %v)", tc.dst, serr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, content) {
				t.Errorf("copy has %d bytes, want the %d of the source", len(got), len(content))
			}
			fi, err := os.Stat(tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm()&0o100 == 0 {
				t.Errorf("copy's mode %v is not executable", fi.Mode())
			}
			srcInfo, _ := os.Stat(src)
			if os.SameFile(fi, srcInfo) {
				t.Error("copy is the source file itself, want a file of its own")
			}
		})
	}
}

// versionServer is a CRI runtime that answers Version only, enough to show a call crossed the floor.
type versionServer struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func (versionServer) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "floor-test-runtime", RuntimeVersion: "1.2.3"}, nil
}

// TestStartFloorRelays builds the floor's own program as the benchmark does, starts it from a copy, and
// calls the CRI through it: the floor the benchmark measures must relay, serve its profiles, and stop
// cleanly on SIGTERM. It runs with extra work per call, as the A/A check's slowed floor does, which
// every call must then take at least.
func TestStartFloorRelays(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the floor proxy")
	}
	dir, err := os.MkdirTemp("", "fl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin, err := framework.BuildPackage(t.Context(), filepath.Join(dir, "bin"), floorPackage, "floor-proxy")
	if err != nil {
		t.Fatal(err)
	}

	backendSock := filepath.Join(dir, "runtime.sock")
	lis, err := net.Listen("unix", backendSock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, versionServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	floorDir := filepath.Join(dir, "floor")
	if err := os.Mkdir(floorDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const extraWork = 40 * time.Millisecond
	f, err := startFloor(floorDir, "unix://"+backendSock, true, floorBuild{path: bin}, extraWork)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = f.Stop(context.WithoutCancel(t.Context()))
		}
	})
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", f.PID()))
	if err != nil {
		t.Fatal(err)
	}
	if exe != filepath.Join(floorDir, "floor-proxy") {
		t.Errorf("floor runs %s, want its own copy in %s", exe, floorDir)
	}

	conn, err := dialCRI(f.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	v, err := waitAnswering(t.Context(), runtimeapi.NewRuntimeServiceClient(conn), 30*time.Second)
	if err != nil {
		t.Fatalf("Version through the floor: %v (log: %s)", err, readLog(f.LogPath))
	}
	if v.GetRuntimeName() != "floor-test-runtime" || v.GetRuntimeVersion() != "1.2.3" {
		t.Errorf("Version through the floor = %q %q, want the backend's floor-test-runtime 1.2.3", v.GetRuntimeName(), v.GetRuntimeVersion())
	}
	start := time.Now()
	if _, err := runtimeapi.NewRuntimeServiceClient(conn).Version(t.Context(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("Version through the floor: %v", err)
	}
	if took := time.Since(start); took < extraWork {
		t.Errorf("a call through the floor took %v, want at least its extra work of %v", took, extraWork)
	}

	// Its profile socket answers, as tandem-proxy's debug socket does.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", f.PprofSocket)
	}}}
	resp, err := hc.Get("http://floor/debug/pprof/")
	if err != nil {
		t.Fatalf("floor profile socket: %v", err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Errorf("floor profile index: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("floor profile index answered %d, want 200", resp.StatusCode)
	}

	stopped = true
	if err := f.Stop(t.Context()); err != nil {
		t.Errorf("Stop: %v, want a clean exit on SIGTERM", err)
	}
}

func readLog(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
