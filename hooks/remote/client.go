package remote

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

// Client is a hook served by a hook server. It implements every stage the protocol has an RPC for;
// PreRemoveContainer has none, so a hook server cannot take part in it.
type Client struct {
	name string
	conn *Conn
}

var (
	_ hooks.PreRunPodSandboxHook            = (*Client)(nil)
	_ hooks.PostStopPodSandboxHook          = (*Client)(nil)
	_ hooks.PreCreateContainerHook          = (*Client)(nil)
	_ hooks.PreStartContainerHook           = (*Client)(nil)
	_ hooks.PostStartContainerHook          = (*Client)(nil)
	_ hooks.PreUpdateContainerResourcesHook = (*Client)(nil)
	_ hooks.PostStopContainerHook           = (*Client)(nil)
)

// NewClient returns the hook name served on conn. Several clients may share one Conn.
func NewClient(name string, conn *Conn) *Client {
	return &Client{name: name, conn: conn}
}

// Name implements hooks.Hook.
func (c *Client) Name() string { return c.name }

// PreRunPodSandbox calls PreRunPodSandboxHook.
func (c *Client) PreRunPodSandbox(ctx context.Context, pod *hooks.PodInfo) (*hooks.Adjustment, error) {
	resp, err := callSandbox(ctx, c, "PreRunPodSandboxHook", v1alpha1.RuntimeHookServiceClient.PreRunPodSandboxHook, pod)
	if err != nil {
		return nil, err
	}
	return sandboxAdjustment(resp), nil
}

// PostStopPodSandbox calls PostStopPodSandboxHook; the answer is not used.
func (c *Client) PostStopPodSandbox(ctx context.Context, pod *hooks.PodInfo) error {
	_, err := callSandbox(ctx, c, "PostStopPodSandboxHook", v1alpha1.RuntimeHookServiceClient.PostStopPodSandboxHook, pod)
	return err
}

// PreCreateContainer calls PreCreateContainerHook.
func (c *Client) PreCreateContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return c.preContainer(ctx, "PreCreateContainerHook", v1alpha1.RuntimeHookServiceClient.PreCreateContainerHook, pod, ctr)
}

// PreStartContainer calls PreStartContainerHook.
func (c *Client) PreStartContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return c.preContainer(ctx, "PreStartContainerHook", v1alpha1.RuntimeHookServiceClient.PreStartContainerHook, pod, ctr)
}

// PreUpdateContainerResources calls PreUpdateContainerResourcesHook.
func (c *Client) PreUpdateContainerResources(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	return c.preContainer(ctx, "PreUpdateContainerResourcesHook", v1alpha1.RuntimeHookServiceClient.PreUpdateContainerResourcesHook, pod, ctr)
}

// PostStartContainer calls PostStartContainerHook; the answer is not used.
func (c *Client) PostStartContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) error {
	_, err := callContainer(ctx, c, "PostStartContainerHook", v1alpha1.RuntimeHookServiceClient.PostStartContainerHook, pod, ctr)
	return err
}

// PostStopContainer calls PostStopContainerHook; the answer is not used.
func (c *Client) PostStopContainer(ctx context.Context, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) error {
	_, err := callContainer(ctx, c, "PostStopContainerHook", v1alpha1.RuntimeHookServiceClient.PostStopContainerHook, pod, ctr)
	return err
}

type sandboxRPC = func(v1alpha1.RuntimeHookServiceClient, context.Context, *v1alpha1.PodSandboxHookRequest, ...grpc.CallOption) (*v1alpha1.PodSandboxHookResponse, error)

type containerRPC = func(v1alpha1.RuntimeHookServiceClient, context.Context, *v1alpha1.ContainerResourceHookRequest, ...grpc.CallOption) (*v1alpha1.ContainerResourceHookResponse, error)

func (c *Client) preContainer(ctx context.Context, rpc string, f containerRPC, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	resp, err := callContainer(ctx, c, rpc, f, pod, ctr)
	if err != nil {
		return nil, err
	}
	if resp.GetPodCgroupParent() != "" {
		klog.FromContext(ctx).V(4).Info("Hook server answered a pod cgroup parent for a container; a container cannot move its pod, so it is ignored",
			"hook", c.name, "rpc", rpc, "podCgroupParent", resp.GetPodCgroupParent())
	}
	return containerAdjustment(resp), nil
}

func callSandbox(ctx context.Context, c *Client, rpc string, f sandboxRPC, pod *hooks.PodInfo) (*v1alpha1.PodSandboxHookResponse, error) {
	return call(ctx, c, rpc, podSandboxRequest(pod), func(api v1alpha1.RuntimeHookServiceClient, req *v1alpha1.PodSandboxHookRequest) (*v1alpha1.PodSandboxHookResponse, error) {
		return f(api, ctx, req)
	})
}

func callContainer(ctx context.Context, c *Client, rpc string, f containerRPC, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*v1alpha1.ContainerResourceHookResponse, error) {
	return call(ctx, c, rpc, containerRequest(pod, ctr), func(api v1alpha1.RuntimeHookServiceClient, req *v1alpha1.ContainerResourceHookRequest) (*v1alpha1.ContainerResourceHookResponse, error) {
		return f(api, ctx, req)
	})
}

// call sends one request. Payloads are logged at V(5) only: they carry pod annotations and environment.
func call[Req, Resp any](ctx context.Context, c *Client, rpc string, req Req, f func(v1alpha1.RuntimeHookServiceClient, Req) (Resp, error)) (Resp, error) {
	var zero Resp
	api, done, err := c.conn.api()
	if err != nil {
		return zero, fmt.Errorf("connection to hook server %s is closed: %w: %w", c.conn.endpoint, err, errdefs.ErrUnavailable)
	}
	defer done()
	logger := klog.FromContext(ctx)
	logger.V(5).Info("Hook server request", "hook", c.name, "rpc", rpc, "endpoint", c.conn.endpoint, "request", req)
	resp, err := f(api, req)
	if err != nil {
		return zero, c.callError(ctx, rpc, fmt.Sprintf("%T", zero), err)
	}
	logger.V(5).Info("Hook server response", "hook", c.name, "rpc", rpc, "response", resp)
	return resp, nil
}

// undecodable starts grpc-go's message for an answer that does not decode as the response: the client's
// verdict, which a server's status never carries (grpc-go servers word their own decoding failures
// "grpc: error unmarshalling request").
const undecodable = "grpc: failed to unmarshal the received message"

// callError gives a failed call the class the dispatcher and the proxy act on. The gRPC status itself
// is not wrapped: the proxy would pass it to kubelet as it is, without the hook's name.
func (c *Client) callError(ctx context.Context, rpc, respType string, err error) error {
	// The dispatcher counts a call that ran out of time by its context error.
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	st := status.Convert(err)
	// An answer that is not the protocol is Internal, as grpc-go makes an answer it cannot decode: the
	// server is there and broken, which the operator must tell from one that is down (Unavailable).
	notGRPC := ""
	switch {
	case st.Code() == codes.Unavailable:
		notGRPC = c.conn.notGRPCDetail()
	case st.Code() == codes.Internal && strings.HasPrefix(st.Message(), undecodable):
		notGRPC = fmt.Sprintf("the answer does not decode as %s: %s", strings.TrimPrefix(respType, "*"), st.Message())
	}
	if notGRPC != "" {
		return fmt.Errorf("hook server %s answered %s with something that is not gRPC (protocol error: the hook server is broken, not down; check that this socket is the hook server its hooks.d file names, serving runtime.v1alpha1.RuntimeHookService): %s: %w",
			c.conn.endpoint, rpc, notGRPC, errdefs.ErrInternal)
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s on %s: %s: %w", rpc, c.conn.endpoint, st.Message(), context.DeadlineExceeded)
	case codes.Canceled:
		// The caller's context did not end: grpc-go ended the call as the connection was closed.
		if c.conn.isClosed() {
			return fmt.Errorf("connection to hook server %s is closed: %w: %w", c.conn.endpoint, errConnClosed, errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%s on %s: %s: %w", rpc, c.conn.endpoint, st.Message(), context.Canceled)
	case codes.Unavailable:
		return fmt.Errorf("hook server %s is unreachable (check that it is running and listening on that socket, and that its hooks.d file names the right endpoint): %s: %w",
			c.conn.endpoint, st.Message(), errdefs.ErrUnavailable)
	}
	return &statusError{endpoint: c.conn.endpoint, rpc: rpc, code: st.Code(), msg: st.Message()}
}

// statusError is an error status a hook server answered: its message is kept as the server wrote it,
// and its code becomes an errdefs class.
type statusError struct {
	endpoint, rpc string
	code          codes.Code
	msg           string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s on %s answered %s: %s", e.rpc, e.endpoint, e.code, e.msg)
}

func (e *statusError) Unwrap() error {
	switch e.code {
	case codes.InvalidArgument:
		return errdefs.ErrInvalidArgument
	case codes.NotFound:
		return errdefs.ErrNotFound
	case codes.AlreadyExists:
		return errdefs.ErrAlreadyExists
	case codes.PermissionDenied:
		return errdefs.ErrPermissionDenied
	case codes.ResourceExhausted:
		return errdefs.ErrResourceExhausted
	case codes.FailedPrecondition:
		return errdefs.ErrFailedPrecondition
	case codes.Aborted:
		return errdefs.ErrAborted
	case codes.OutOfRange:
		return errdefs.ErrOutOfRange
	case codes.Unimplemented:
		return errdefs.ErrNotImplemented
	case codes.Internal:
		return errdefs.ErrInternal
	case codes.DataLoss:
		return errdefs.ErrDataLoss
	case codes.Unauthenticated:
		return errdefs.ErrUnauthenticated
	}
	return errdefs.ErrUnknown
}
