// Package remote calls hook servers: gRPC services on unix sockets that speak Koordinator's runtime hook
// protocol (runtime.v1alpha1.RuntimeHookService), so koordlet and other servers written for
// koord-runtime-proxy work with Tandem unchanged.
//
// A Client is a hooks.Hook: the dispatcher runs it like an in-process hook, under the timeout and failure
// policy of its registration. Hook servers are registered by JSON files in a directory (hooks.d); the
// Loader reads it into hooks.Registrations and the Watcher reloads it on every change.
package remote

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

const (
	// maxMessage is the largest request or answer on the wire, as containerd accepts from kubelet:
	// grpc-go's default of 4 MiB would refuse an answer that echoes a large pod back. What an answer may
	// add is bounded apart, by hooks.Limits.MaxAnswerBytes, when it is merged.
	maxMessage = 16 << 20
	// window is the flow-control window granted per stream and per connection. A fixed window turns off
	// grpc-go's bandwidth estimation, whose ping after every answer costs both sides a write and a
	// wake-up; on a local socket the window never needs to grow.
	window = 1 << 20
)

// Conn is the connection to one hook server endpoint, shared by every hook registered with it: a grpc-go
// channel on its unix socket. A hook server that restarted is reached again by the next call; one that
// is away fails the call at once (grpc-go's WaitForReady(false)), not at its timeout.
type Conn struct {
	endpoint string
	path     string

	mu     sync.Mutex
	ch     *channel
	closed bool
	// notGRPC says what the socket sent on the latest connection, when that was not HTTP/2; empty
	// otherwise.
	notGRPC string
}

// channel is one grpc-go channel and the calls made on it, so that it is closed only once they ended.
type channel struct {
	cc    *grpc.ClientConn
	hooks v1alpha1.RuntimeHookServiceClient
	calls sync.WaitGroup
}

// NewConn checks endpoint, a unix socket as an absolute path (as Koordinator's files give it) or a
// unix:// URL. It does not connect: that happens on the first call.
func NewConn(endpoint string) (*Conn, error) {
	path, err := endpointPath(endpoint)
	if err != nil {
		return nil, err
	}
	return &Conn{endpoint: endpoint, path: path}, nil
}

// endpointPath is the path of endpoint's socket.
func endpointPath(endpoint string) (string, error) {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok && strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("endpoint %q: hook servers listen on unix sockets; give an absolute socket path or unix:///path", endpoint)
	}
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("endpoint %q: the socket path must be absolute, as in unix:///run/my-hook.sock", endpoint)
	}
	return filepath.Clean(path), nil
}

// Endpoint is the endpoint as it was configured, for messages.
func (c *Conn) Endpoint() string { return c.endpoint }

// api returns the service client for one call, and done, to call when the call returned.
func (c *Conn) api() (api v1alpha1.RuntimeHookServiceClient, done func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, errConnClosed
	}
	// A channel that failed to connect waits out grpc-go's reconnect backoff (a second, growing to two
	// minutes) and fails every call meanwhile: a new channel tries the socket on this call, so a hook
	// server that came back is reached at once.
	if c.ch != nil && c.ch.cc.GetState() == connectivity.TransientFailure {
		c.ch.closeWhenIdle()
		c.ch = nil
	}
	if c.ch == nil {
		cc, err := grpc.NewClient("unix://"+c.path,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(c.dial),
			grpc.WithInitialWindowSize(window),
			grpc.WithInitialConnWindowSize(window),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)))
		if err != nil {
			return nil, nil, fmt.Errorf("hook server %s: %w", c.endpoint, err)
		}
		c.ch = &channel{cc: cc, hooks: v1alpha1.NewRuntimeHookServiceClient(cc)}
	}
	ch := c.ch
	ch.calls.Add(1)
	return ch.hooks, ch.calls.Done, nil
}

// errConnClosed is the error of a call on a closed Conn.
var errConnClosed = errors.New("its hooks.d file changed or was removed")

// closeWhenIdle closes the channel once the calls on it returned: they fail at once, as it did not
// connect. No call starts on it any more.
func (ch *channel) closeWhenIdle() {
	go func() {
		ch.calls.Wait()
		_ = ch.cc.Close()
	}()
}

// Close closes the connection; calls still in flight fail.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.ch == nil {
		return nil
	}
	return c.ch.cc.Close()
}

// isClosed reports whether Close was called.
func (c *Conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// notGRPCDetail says what the socket sent on the latest connection judged when that was not HTTP/2.
func (c *Conn) notGRPCDetail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.notGRPC
}

func (c *Conn) setNotGRPC(detail string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notGRPC = detail
}

// dial connects grpc-go to the socket, watching what the server sends first. The verdict on a broken
// server stands until a later connection is judged otherwise or cannot be made: grpc-go may dial
// again (reconnecting in the background) while the call that met the broken server is still being
// reported, and clearing the verdict at every dial made that call read as "unreachable".
func (c *Conn) dial(ctx context.Context, _ string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		c.setNotGRPC("") // nothing listens: down, not broken
		return nil, err
	}
	return &prefaceConn{Conn: nc, owner: c}, nil
}

// prefaceConn checks the first bytes a hook server sends. An HTTP/2 server starts with its SETTINGS
// frame; anything else comes from a socket of something else, or a broken server, which the operator
// must tell from one that is down. grpc-go reports both as unavailable.
type prefaceConn struct {
	net.Conn
	owner *Conn
	// judged is set once the first bytes were judged; reads after that pass straight through.
	judged atomic.Bool

	mu   sync.Mutex
	head []byte
}

func (p *prefaceConn) Read(b []byte) (int, error) {
	n, err := p.Conn.Read(b)
	if p.judged.Load() {
		return n, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.judged.Load() {
		p.head = append(p.head, b[:min(n, http2FrameHeader-len(p.head))]...)
		p.judge(peerEnded(err))
	}
	return n, err
}

// peerEnded tells whether err says the server ended the connection. grpc-go closing it on its side
// (net.ErrClosed) says nothing about the server: judging that as a silent hang-up would clear the
// verdict on a broken server that another connection just made.
func peerEnded(err error) bool {
	return err != nil && !errors.Is(err, net.ErrClosed)
}

// Write looks, when writing fails before the server said anything, whether the server wrote something
// before it hung up: grpc-go stops at the failed write and never reads it. What the server sent may still
// be unread, or being read at this moment by grpc-go's reader, which holds the connection's read lock
// (so peeking waits for it) and then records it in head: Write looks again for a short while before it
// calls the hang-up silent.
func (p *prefaceConn) Write(b []byte) (int, error) {
	n, err := p.Conn.Write(b)
	if !peerEnded(err) || p.judged.Load() {
		return n, err
	}
	deadline := time.Now().Add(silentHangupWait)
	for {
		p.mu.Lock()
		if !p.judged.Load() {
			if sent := peek(p.Conn, http2FrameHeader); len(sent) > len(p.head) {
				p.head = sent
			}
			if len(p.head) > 0 || time.Now().After(deadline) {
				p.judge(true)
			}
		}
		judged := p.judged.Load()
		p.mu.Unlock()
		if judged {
			return n, err
		}
		time.Sleep(time.Millisecond)
	}
}

// silentHangupWait bounds how long a failed write waits for what the server sent before hanging up.
const silentHangupWait = 50 * time.Millisecond

// http2FrameHeader is the length of an HTTP/2 frame header.
const http2FrameHeader = 9

// judge decides once the frame header is in, or once the connection ended (ended) with less. Called
// with p.mu held.
func (p *prefaceConn) judge(ended bool) {
	switch {
	case len(p.head) == http2FrameHeader:
		p.judged.Store(true)
		length := uint32(p.head[0])<<16 | uint32(p.head[1])<<8 | uint32(p.head[2])
		settings := http2.FrameType(p.head[3]) == http2.FrameSettings && p.head[4] == 0 &&
			binary.BigEndian.Uint32(p.head[5:])&(1<<31-1) == 0 && length%6 == 0 && length <= 16<<10
		detail := ""
		if !settings {
			detail = fmt.Sprintf("its first bytes %q are not an HTTP/2 SETTINGS frame", p.head)
		}
		p.owner.setNotGRPC(detail)
	case ended:
		p.judged.Store(true)
		// A server that hung up without a word is down, or going down; one that said less than a frame
		// header did not speak HTTP/2.
		detail := ""
		if len(p.head) > 0 {
			detail = fmt.Sprintf("it sent %q and hung up", p.head)
		}
		p.owner.setNotGRPC(detail)
	}
}

// peek returns up to n bytes waiting to be read on nc, without reading them or waiting for more.
func peek(nc net.Conn, n int) []byte {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	buf := make([]byte, n)
	got := 0
	_ = raw.Read(func(fd uintptr) bool {
		got, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	return buf[:max(got, 0)]
}
