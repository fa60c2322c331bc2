package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/resource/cgroup"
)

// fakeCg is a cgroup v1 tree in a temp dir with one pod cgroup; the e2e suite writes real cgroups.
type fakeCg struct {
	root, parent string
	writer       cgroup.Writer
}

func fakeCgroupV1(t testing.TB, parent string, files ...string) *fakeCg {
	t.Helper()
	root := t.TempDir()
	for _, f := range files {
		ctrl, _, _ := strings.Cut(f, ".")
		touch(t, filepath.Join(root, ctrl, parent, f))
	}
	if err := os.MkdirAll(filepath.Join(root, "cpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeCg{root: root, parent: parent, writer: w}
}

// touch makes an empty file and its directories, as a cgroup file stands in a fake tree.
func touch(t testing.TB, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (c *fakeCg) read(t testing.TB, file string) string {
	t.Helper()
	ctrl, _, _ := strings.Cut(file, ".")
	b, err := os.ReadFile(filepath.Join(c.root, ctrl, c.parent, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeRuntime is an in-memory CRI runtime for unit tests of the proxy's own logic (forwarding, store,
// recovery) where starting containerd would only slow the test down; the e2e suite runs the same paths
// against real containerd and runc.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	mu         sync.Mutex
	next       int
	pods       map[string]*runtimeapi.PodSandbox
	podCfg     map[string]*runtimeapi.PodSandboxConfig
	ctrs       map[string]*runtimeapi.Container
	ctrCfg     map[string]*runtimeapi.ContainerConfig
	lastCreate *runtimeapi.CreateContainerRequest
	lastUpdate *runtimeapi.UpdateContainerResourcesRequest
	// onUpdate, when set, acts as the runtime would on an update (writes the quota into a real cgroup).
	onUpdate  func(*runtimeapi.UpdateContainerResourcesRequest) error
	createErr error
	events    chan *runtimeapi.ContainerEventResponse
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{
		pods: map[string]*runtimeapi.PodSandbox{}, podCfg: map[string]*runtimeapi.PodSandboxConfig{},
		ctrs: map[string]*runtimeapi.Container{}, ctrCfg: map[string]*runtimeapi.ContainerConfig{},
		events: make(chan *runtimeapi.ContainerEventResponse, 16),
	}
}

func (f *fakeRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	// Echo metadata back so tests can check it crossed the proxy both ways.
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("x-test")) > 0 {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-echo", md.Get("x-test")[0]))
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-trailer", "t"))
	}
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeRuntime) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	id := fmt.Sprintf("pod-%d", f.next)
	f.pods[id] = &runtimeapi.PodSandbox{Id: id, Metadata: req.GetConfig().GetMetadata(), State: runtimeapi.PodSandboxState_SANDBOX_READY,
		Labels: req.GetConfig().GetLabels(), Annotations: req.GetConfig().GetAnnotations(), CreatedAt: time.Now().UnixNano()}
	f.podCfg[id] = req.GetConfig()
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (f *fakeRuntime) StopPodSandbox(_ context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.pods[req.GetPodSandboxId()]; ok {
		p.State = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (f *fakeRuntime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, req.GetPodSandboxId())
	for id, c := range f.ctrs {
		if c.GetPodSandboxId() == req.GetPodSandboxId() {
			delete(f.ctrs, id)
		}
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg, ok := f.podCfg[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "an error occurred when try to find sandbox %q: not found", req.GetPodSandboxId())
	}
	// The shape containerd uses: the original config, JSON encoded, under info["info"].
	info := fmt.Sprintf(`{"pid":1,"config":{"metadata":{"name":%q},"linux":{"cgroup_parent":%q}}}`, cfg.GetMetadata().GetName(), cfg.GetLinux().GetCgroupParent())
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: req.GetPodSandboxId()}, Info: map[string]string{"info": info}}, nil
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, p := range f.pods {
		resp.Items = append(resp.Items, p)
	}
	return resp, nil
}

func (f *fakeRuntime) podCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pods)
}

func (f *fakeRuntime) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastCreate = req
	if f.createErr != nil {
		return nil, f.createErr
	}
	if _, ok := f.pods[req.GetPodSandboxId()]; !ok {
		return nil, status.Errorf(codes.NotFound, "failed to get sandbox %q: not found", req.GetPodSandboxId())
	}
	f.next++
	id := fmt.Sprintf("ctr-%d", f.next)
	f.ctrs[id] = &runtimeapi.Container{Id: id, PodSandboxId: req.GetPodSandboxId(), Metadata: req.GetConfig().GetMetadata(),
		Image: req.GetConfig().GetImage(), State: runtimeapi.ContainerState_CONTAINER_CREATED}
	f.ctrCfg[id] = req.GetConfig()
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (f *fakeRuntime) setState(id string, st runtimeapi.ContainerState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.ctrs[id]
	if !ok {
		return status.Errorf(codes.NotFound, "container %q not found", id)
	}
	c.State = st
	return nil
}

func (f *fakeRuntime) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	return &runtimeapi.StartContainerResponse{}, f.setState(req.GetContainerId(), runtimeapi.ContainerState_CONTAINER_RUNNING)
}

func (f *fakeRuntime) StopContainer(_ context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return &runtimeapi.StopContainerResponse{}, f.setState(req.GetContainerId(), runtimeapi.ContainerState_CONTAINER_EXITED)
}

func (f *fakeRuntime) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ctrs, req.GetContainerId())
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range f.ctrs {
		resp.Containers = append(resp.Containers, c)
	}
	return resp, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.ctrs[req.GetContainerId()]
	if !ok {
		// Error details must reach the caller unchanged.
		st, _ := status.New(codes.NotFound, fmt.Sprintf("an error occurred when try to find container %q: not found", req.GetContainerId())).
			WithDetails(wrapperspb.String("detail-" + req.GetContainerId()))
		return nil, st.Err()
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: c.Id, Metadata: c.Metadata, State: c.State,
		Resources: &runtimeapi.ContainerResources{Linux: f.ctrCfg[c.Id].GetLinux().GetResources()},
	}}, nil
}

func (f *fakeRuntime) UpdateContainerResources(_ context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastUpdate = req
	if f.onUpdate != nil {
		if err := f.onUpdate(req); err != nil {
			return nil, status.Error(codes.Unknown, err.Error())
		}
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

func (f *fakeRuntime) ExecSync(_ context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	// Large output lets tests push a message past the size limit.
	return &runtimeapi.ExecSyncResponse{Stdout: make([]byte, len(req.GetCmd())*1024)}, nil
}

func (f *fakeRuntime) GetContainerEvents(_ *runtimeapi.GetEventsRequest, srv runtimeapi.RuntimeService_GetContainerEventsServer) error {
	for {
		select {
		case <-srv.Context().Done():
			return srv.Context().Err()
		case ev, ok := <-f.events:
			if !ok {
				return nil
			}
			if err := srv.Send(ev); err != nil {
				return err
			}
		}
	}
}

func (f *fakeRuntime) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:1", RepoTags: []string{"docker.io/library/x:1"}}}}, nil
}

// futureEcho answers a method that the vendored CRI API does not have, as a newer runtime would.
func futureEcho(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	if method != "/runtime.v1.FutureService/Echo" {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	for {
		var m wrapperspb.StringValue
		if err := stream.RecvMsg(&m); err != nil {
			return nil
		}
		if err := stream.SendMsg(wrapperspb.String("echo:" + m.GetValue())); err != nil {
			return err
		}
	}
}

type harness struct {
	// logs holds what the proxy logged.
	logs     ktesting.Buffer
	rt       *fakeRuntime
	rtServer *grpc.Server
	rtSock   string
	srv      *Server
	sock     string
	direct   *grpc.ClientConn
	client   *grpc.ClientConn
	stop     context.CancelFunc
	done     chan error
}

type harnessOpts struct {
	hooks      []hooks.Registration
	cgroups    cgroup.Writer
	rdt        frontend.RDT
	stateDir   string
	rt         *fakeRuntime
	registerer prometheus.Registerer
	// rtMaxSend raises the runtime's send limit above containerd's 16 MiB.
	rtMaxSend int
}

// startRuntime serves rt on sock. containerd accepts and sends messages up to 16 MiB, as kubelet does;
// maxSend raises the send limit above that.
func startRuntime(t testing.TB, rt *fakeRuntime, sock string, maxSend int) *grpc.Server {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.UnknownServiceHandler(futureEcho), grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(max(maxSend, 16<<20)))
	runtimeapi.RegisterRuntimeServiceServer(gs, rt)
	runtimeapi.RegisterImageServiceServer(gs, rt)
	go func() { _ = gs.Serve(lis) }()
	return gs
}

func dialUnix(t testing.TB, sock string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{rt: o.rt, rtSock: filepath.Join(dir, "rt.sock"), sock: filepath.Join(dir, "tandem.sock")}
	if h.rt == nil {
		h.rt = newFakeRuntime()
	}
	h.rtServer = startRuntime(t, h.rt, h.rtSock, o.rtMaxSend)
	t.Cleanup(h.rtServer.Stop)

	cfg := DefaultConfig()
	cfg.Listen = h.sock
	cfg.RuntimeEndpoint = "unix://" + h.rtSock
	cfg.StateDir = o.stateDir
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(dir, "state")
	}
	cfg.ShutdownTimeout = 2 * time.Second
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	h.logs = logger.GetSink().(ktesting.Underlier).GetBuffer()
	d, err := hooks.NewDispatcher(ctx, o.hooks, o.registerer)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, frontend.Deps{Hooks: d, Cgroups: o.cgroups, RDT: o.rdt})
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	if err := srv.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	lis, err := Listen(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, h.stop = context.WithCancel(ctx)
	h.done = make(chan error, 1)
	go func() { h.done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		h.stop()
		if err := <-h.done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		_ = srv.Close()
	})
	h.direct = dialUnix(t, h.rtSock)
	h.client = dialUnix(t, h.sock)
	return h
}

func (h *harness) rs() runtimeapi.RuntimeServiceClient {
	return runtimeapi.NewRuntimeServiceClient(h.client)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
