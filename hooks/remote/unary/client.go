// Package unary is a gRPC client for unary calls to a server on a unix socket that makes each call on
// the caller's goroutine: the caller writes the request and reads the answer itself. grpc-go hands every
// call to a writer goroutine and back from a reader goroutine; between processes on a node's few shared
// CPUs those hand-offs are thread wake-ups, and they cost a hook call a third of a round trip more (see
// docs/hooks.md, Benchmark).
//
// It speaks HTTP/2 through golang.org/x/net/http2's framer and implements grpc.ClientConnInterface, so
// generated clients run on it unchanged. It has what hook calls need and no more: unary calls only, no
// compression, no call options, no TLS. Each connection carries one call at a time; idle connections
// are kept for the next call and checked before reuse, so a server that restarted costs no failed call.
package unary

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// sweepEvery is how often idle connections are looked at. A server that stops gracefully waits for
// its clients to answer its GOAWAY ping (grpc-go waits up to 5 s); nobody reads an idle connection, so
// the sweep closes the ones the server wrote to, and a restarting hook server waits at most this long.
const sweepEvery = time.Second

// maxIdle is how many idle connections a Client keeps: as many as kubelet makes calls at once, about.
// Calls beyond it open connections of their own, closed when they end.
const maxIdle = 4

// Client calls the gRPC server listening on one unix socket. It is safe for concurrent use.
type Client struct {
	path   string
	dialer net.Dialer

	mu     sync.Mutex
	idle   []*conn // most recently used last
	inUse  map[*conn]struct{}
	closed bool
	// sweeping is set while the sweep goroutine runs, every sweepEvery; stop ends it.
	sweeping   bool
	sweepEvery time.Duration
	stop       chan struct{}
}

var _ grpc.ClientConnInterface = (*Client)(nil)

// New returns a client of the server on the unix socket at path. It does not connect: the first call
// does.
func New(path string) *Client {
	return &Client{path: path, inUse: map[*conn]struct{}{}, sweepEvery: sweepEvery, stop: make(chan struct{})}
}

// Invoke makes a unary call. Its errors are gRPC statuses, as grpc-go's: the server's own, Unavailable
// when the server cannot be reached or drops the connection, DeadlineExceeded or Canceled when ctx ends,
// and Internal, as a *ProtocolError, when what the server answered is not gRPC or does not decode as
// reply. opts are not supported and ignored.
func (c *Client) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	req, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "unary: request %T is not a protocol buffer message", args)
	}
	resp, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "unary: reply %T is not a protocol buffer message", reply)
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	for attempt := 0; ; attempt++ {
		cn, err := c.get(ctx)
		if err != nil {
			return err
		}
		err = cn.call(ctx, method, req, resp)
		c.put(cn)
		// A request the server never took (it was going away, or had refused the stream) is safe to send
		// again, once, on a fresh connection.
		var up *unprocessedError
		if errors.As(err, &up) {
			if attempt == 0 {
				continue
			}
			return up.st.Err()
		}
		return err
	}
}

// NewStream is not supported: hook services are unary.
func (c *Client) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "unary: streaming calls are not supported")
}

// Close closes every connection; calls in flight fail with Unavailable, and later calls fail too.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		close(c.stop)
	}
	c.closed = true
	var errs []error
	for _, cn := range c.idle {
		errs = append(errs, cn.close())
	}
	c.idle = nil
	for cn := range c.inUse {
		errs = append(errs, cn.close())
	}
	return errors.Join(errs...)
}

// get returns an idle connection that is still sound, or a new one.
func (c *Client) get(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, status.Errorf(codes.Unavailable, "unary: client of %s is closed", c.path)
		}
		if len(c.idle) == 0 {
			c.mu.Unlock()
			break
		}
		last := len(c.idle) - 1
		cn := c.idle[last]
		c.idle[last] = nil
		c.idle = c.idle[:last]
		c.inUse[cn] = struct{}{}
		c.mu.Unlock()
		// Checked outside the lock: reading what the server sent may take a moment.
		if cn.sound() {
			return cn, nil
		}
		c.mu.Lock()
		delete(c.inUse, cn)
		c.mu.Unlock()
		_ = cn.close()
	}
	nc, err := c.dialer.DialContext(ctx, "unix", c.path)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, status.FromContextError(ctxErr).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "connect to %s: %v", c.path, err)
	}
	cn, err := newConn(nc)
	if err != nil {
		var pe *ProtocolError
		if errors.As(err, &pe) {
			return nil, pe
		}
		return nil, status.Errorf(codes.Unavailable, "start HTTP/2 on %s: %v", c.path, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = cn.close()
		return nil, status.Errorf(codes.Unavailable, "unary: client of %s is closed", c.path)
	}
	c.inUse[cn] = struct{}{}
	return cn, nil
}

// put keeps cn for the next call if it can carry one, and closes it otherwise.
func (c *Client) put(cn *conn) {
	c.mu.Lock()
	delete(c.inUse, cn)
	keep := !c.closed && cn.reusable() && len(c.idle) < maxIdle
	if keep {
		c.idle = append(c.idle, cn)
		if !c.sweeping {
			c.sweeping = true
			go c.sweep()
		}
	}
	c.mu.Unlock()
	if !keep {
		_ = cn.close()
	}
}

// sweep closes, every sweepEvery, the idle connections the server closed or wrote to. It ends with the
// client, or when no connection is left idle.
func (c *Client) sweep() {
	t := time.NewTicker(c.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		var stale []*conn
		c.mu.Lock()
		kept := c.idle[:0]
		for _, cn := range c.idle {
			if pending, ok := cn.peek(); pending || !ok {
				stale = append(stale, cn)
				continue
			}
			kept = append(kept, cn)
		}
		clear(c.idle[len(kept):])
		c.idle = kept
		done := len(c.idle) == 0
		if done {
			c.sweeping = false
		}
		c.mu.Unlock()
		for _, cn := range stale {
			_ = cn.close()
		}
		if done {
			return
		}
	}
}

// ProtocolError is an answer the client could not take as gRPC: bytes that are not HTTP/2, frames that
// break it, or a message that does not decode as the call's response. It is the status grpc-go gives
// such answers (Internal), and tells a server that answered wrongly, which is broken, from one that
// could not be reached, which is down (Unavailable). Invoke never retries it.
type ProtocolError struct{ st *status.Status }

func protocolErrorf(format string, args ...any) *ProtocolError {
	return &ProtocolError{st: status.Newf(codes.Internal, format, args...)}
}

func (e *ProtocolError) Error() string { return e.st.Err().Error() }

// GRPCStatus makes the error a gRPC status to status.FromError and status.Code.
func (e *ProtocolError) GRPCStatus() *status.Status { return e.st }

// Detail says what was wrong with the answer.
func (e *ProtocolError) Detail() string { return e.st.Message() }

// unprocessedError is a call the server did not process; Invoke retries it once.
type unprocessedError struct{ st *status.Status }

func (e *unprocessedError) Error() string { return fmt.Sprintf("not processed: %v", e.st.Err()) }
