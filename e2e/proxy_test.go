//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/e2e/framework"
)

const unknownID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestRuntimeErrorsPassThrough: a request the runtime rejects must come back
// through the proxy with the runtime's own code and message.
func TestRuntimeErrorsPassThrough(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		cfg := framework.PodSandboxConfig("bad-input", "e2e", true)
		badHandler := framework.PodSandboxConfig("bad-handler", "e2e", true)
		t.Cleanup(func() {
			_ = os.RemoveAll(cfg.GetLogDirectory())
			_ = os.RemoveAll(badHandler.GetLogDirectory())
		})
		podID, _ := e.runPod(t, ctx, e.direct, "bad-input", true, 0)
		cases := []struct {
			name string
			call func(rs internalapi.RuntimeService) error
			// idempotent: containerd 2 accepts it (then the proxy must too).
			idempotent bool
			// newID: the runtime names an id it generated per call.
			newID bool
		}{
			{name: "ContainerStatus of an unknown id", call: func(rs internalapi.RuntimeService) error {
				_, err := rs.ContainerStatus(ctx, unknownID, false)
				return err
			}},
			{name: "PodSandboxStatus of an unknown id", call: func(rs internalapi.RuntimeService) error {
				_, err := rs.PodSandboxStatus(ctx, unknownID, false)
				return err
			}},
			{name: "CreateContainer in an unknown sandbox", call: func(rs internalapi.RuntimeService) error {
				_, err := rs.CreateContainer(ctx, unknownID, framework.ContainerConfig("orphan", "true"), cfg)
				return err
			}},
			{name: "CreateContainer of a missing image", call: func(rs internalapi.RuntimeService) error {
				c := framework.ContainerConfig("no-image")
				c.Image = &runtimeapi.ImageSpec{Image: "docker.io/library/no-such-image:0"}
				_, err := rs.CreateContainer(ctx, podID, c, cfg)
				return err
			}},
			{name: "StartContainer of an unknown id", call: func(rs internalapi.RuntimeService) error { return rs.StartContainer(ctx, unknownID) }},
			{name: "StopContainer of an unknown id", call: func(rs internalapi.RuntimeService) error { return rs.StopContainer(ctx, unknownID, 1) }, idempotent: true},
			{name: "ExecSync in an unknown container", call: func(rs internalapi.RuntimeService) error {
				_, _, err := rs.ExecSync(ctx, unknownID, []string{"true"}, 5*time.Second)
				return err
			}},
			{name: "UpdateContainerResources of an unknown id", call: func(rs internalapi.RuntimeService) error {
				return rs.UpdateContainerResources(ctx, unknownID, &runtimeapi.ContainerResources{Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512}})
			}},
			{name: "RunPodSandbox without metadata", call: func(rs internalapi.RuntimeService) error {
				_, err := rs.RunPodSandbox(ctx, &runtimeapi.PodSandboxConfig{}, "")
				return err
			}},
			{name: "RunPodSandbox with an unknown runtime handler", call: func(rs internalapi.RuntimeService) error {
				_, err := rs.RunPodSandbox(ctx, badHandler, "no-such-handler")
				return err
			}, newID: true},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				want := status.Convert(tc.call(e.direct))
				got := status.Convert(tc.call(e.viaProxy))
				if want.Code() == codes.OK && !tc.idempotent {
					t.Fatalf("containerd accepted the request directly; the case no longer tests a rejection")
				}
				gotMsg, wantMsg := got.Message(), want.Message()
				if tc.newID {
					gotMsg, wantMsg = generatedID.ReplaceAllString(gotMsg, "<id>"), generatedID.ReplaceAllString(wantMsg, "<id>")
				}
				if got.Code() != want.Code() || gotMsg != wantMsg {
					t.Errorf("through the proxy: %v %q\ndirect:            %v %q", got.Code(), got.Message(), want.Code(), want.Message())
				}
			})
		}

		t.Run("oversize message", func(t *testing.T) {
			big := framework.ContainerConfig("big")
			big.Annotations = map[string]string{"padding": strings.Repeat("x", 17<<20)}
			_, err := e.viaProxy.CreateContainer(ctx, podID, big, cfg)
			if status.Code(err) != codes.ResourceExhausted {
				t.Errorf("17 MiB CreateContainer through the proxy: %v, want ResourceExhausted", err)
			}
			if _, err := e.viaProxy.Version(ctx, "v1"); err != nil {
				t.Errorf("Version after an oversize message: %v (the proxy must stay up)", err)
			}
		})
	})
}

// TestProxyProcess checks what an operator sees of the process: the socket's
// mode and owner, a second proxy on the same socket refused while the first
// keeps serving, per-method metrics, and a clean exit 0 on SIGTERM.
func TestProxyProcess(t *testing.T) {
	forEachRuntime(t, envOptions{}, func(t *testing.T, ctx context.Context, e *env) {
		t.Run("socket mode and owner", func(t *testing.T) {
			fi, err := os.Stat(e.proxy.Socket)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
				t.Errorf("%s mode = %v, want a socket with 0660", e.proxy.Socket, fi.Mode())
			}
			rt, err := os.Stat(e.containerd.Socket)
			if err != nil {
				t.Fatal(err)
			}
			got, want := fi.Sys().(*syscall.Stat_t), rt.Sys().(*syscall.Stat_t)
			if got.Uid != want.Uid || got.Gid != want.Gid {
				t.Errorf("socket owner = %d:%d, want the runtime socket's %d:%d", got.Uid, got.Gid, want.Uid, want.Gid)
			}
		})

		t.Run("second proxy on the same socket", func(t *testing.T) {
			bin, _ := proxyBinary()
			second, err := framework.StartProxy(ctx, framework.ProxyOptions{
				Binary: bin, RuntimeEndpoint: e.containerd.Endpoint,
				Dir: filepath.Join(e.dir, "proxy2"), Listen: e.proxy.Socket,
			})
			if err == nil {
				second.Stop(ctx) //nolint:errcheck // the test failed already
				t.Fatalf("a second tandem-proxy started on %s while the first serves it", e.proxy.Socket)
			}
			if !strings.Contains(err.Error(), "exited with code") || !strings.Contains(err.Error(), e.proxy.Socket) {
				t.Errorf("second proxy's failure = %v; want a non-zero exit whose error names %s", err, e.proxy.Socket)
			}
			t.Logf("second proxy refused as expected: %v", err)
			if _, err := os.Stat(e.proxy.Socket); err != nil {
				t.Errorf("the first proxy's socket is gone: %v", err)
			}
			if _, err := e.viaProxy.Version(ctx, "v1"); err != nil {
				t.Errorf("the first proxy stopped serving: %v", err)
			}
		})

		t.Run("metrics", func(t *testing.T) {
			for range 3 {
				if _, err := e.viaProxy.Version(ctx, "v1"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.viaProxy.ListContainers(ctx, nil); err != nil {
				t.Fatal(err)
			}
			_, _ = e.viaProxy.ContainerStatus(ctx, unknownID, false)
			if _, err := e.viaProxyImages.ListImages(ctx, nil); err != nil {
				t.Fatal(err)
			}
			text, err := e.proxy.Metrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			counts := requestCounts(text)
			for _, tc := range []struct {
				method, code string
				min          float64
			}{
				{"/runtime.v1.RuntimeService/Version", "OK", 3},
				{"/runtime.v1.RuntimeService/ListContainers", "OK", 1},
				{"/runtime.v1.RuntimeService/ContainerStatus", "NotFound", 1},
				{"/runtime.v1.ImageService/ListImages", "OK", 1},
			} {
				if got := counts[tc.method+" "+tc.code]; got < tc.min {
					t.Errorf("tandem_proxy_requests_total{method=%q,code=%q} = %v, want >= %v", tc.method, tc.code, got, tc.min)
				}
			}
			if !strings.Contains(text, "tandem_proxy_request_duration_seconds") {
				t.Errorf("/metrics lacks tandem_proxy_request_duration_seconds")
			}
		})

		t.Run("SIGTERM exits 0", func(t *testing.T) {
			code, err := e.proxy.Stop(ctx)
			if err != nil {
				t.Fatalf("stop tandem-proxy: %v", err)
			}
			if code != 0 {
				t.Errorf("tandem-proxy exit code after SIGTERM = %d, want 0", code)
			}
			if _, err := e.direct.Version(ctx, "v1"); err != nil {
				t.Errorf("containerd after the proxy stopped: %v", err)
			}
		})
	})
}

var generatedID = regexp.MustCompile(`[0-9a-f]{64}`)

var sampleLine = regexp.MustCompile(`^tandem_proxy_requests_total\{(.*)\} (\S+)$`)
var labelPair = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// requestCounts maps "method code" to tandem_proxy_requests_total.
func requestCounts(text string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[1], -1) {
			labels[p[1]] = p[2]
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		out[labels["method"]+" "+labels["code"]] += v
	}
	return out
}
