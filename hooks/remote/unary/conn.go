package unary

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

const (
	// window is the flow-control window the client grants per stream and for the connection: it never
	// needs to grow on a local socket, so the client never pings to measure bandwidth.
	window = 1 << 20
	// maxMessage is the largest answer accepted, as containerd accepts from kubelet.
	maxMessage = 16 << 20
	// keepBuffer is the largest request buffer kept for the next call.
	keepBuffer = 64 << 10
	// drainTimeout bounds reading what a server sent to an idle connection: whole frames, already sent.
	drainTimeout = 100 * time.Millisecond
	// HTTP/2's defaults, in force until the server's SETTINGS say otherwise.
	defaultMaxFrame = 16 << 10
	defaultWindow   = 65535
	maxStreamID     = 1<<31 - 1

	userAgent = "tandem-unary"
)

// conn is one HTTP/2 connection. Only the goroutine making its call touches it, except close.
type conn struct {
	nc   net.Conn
	raw  syscall.RawConn // for the liveness check; nil where the connection has no file descriptor
	in   received        // nc as br reads it
	bw   *bufio.Writer
	br   *bufio.Reader
	fr   *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
	msg  []byte

	nextID uint32
	// What the server allows: its frame size, the window a new stream starts with, and what is left of
	// the connection's window.
	maxFrame   uint32
	peerWindow int64
	sendWindow int64
	// recvUnacked is what the server sent since the client last gave the connection window back.
	recvUnacked uint32
	// pingAcks answer the server's pings with the next request rather than at once: a write and a
	// wake-up of the server's reader less per call, while the server is busy answering.
	pingAcks [][8]byte

	// prefaced is set once the server's connection preface, a SETTINGS frame, has arrived. Until then
	// anything the server sends that is not one is not HTTP/2: a socket of something else, or a broken
	// server, which is not the same as one that is down.
	prefaced  bool
	goingAway bool
	broken    bool
	closeOnce sync.Once
	closeErr  error
}

// received counts the bytes read from the server, to tell a server that closed the connection
// without a word from one that answered something else than HTTP/2.
type received struct {
	r io.Reader
	n int64
}

func (r *received) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	return n, err
}

func newConn(nc net.Conn) (*conn, error) {
	cn := &conn{nc: nc, in: received{r: nc}, nextID: 1, maxFrame: defaultMaxFrame, peerWindow: defaultWindow, sendWindow: defaultWindow}
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			cn.raw = raw
		}
	}
	cn.bw = bufio.NewWriterSize(nc, 16<<10)
	cn.br = bufio.NewReaderSize(&cn.in, 16<<10)
	cn.fr = http2.NewFramer(cn.bw, cn.br)
	// The client never raises SETTINGS_MAX_FRAME_SIZE, so no HTTP/2 server sends more; what claims to
	// is not HTTP/2, and is refused from its first bytes instead of waited for.
	cn.fr.SetMaxReadFrameSize(defaultMaxFrame)
	cn.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cn.fr.MaxHeaderListSize = 1 << 20
	cn.fr.SetReuseFrames()
	cn.henc = hpack.NewEncoder(&cn.hbuf)
	_, err := cn.bw.WriteString(http2.ClientPreface)
	if err == nil {
		err = cn.fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	}
	if err == nil {
		err = cn.fr.WriteWindowUpdate(0, window-defaultWindow)
	}
	if err == nil {
		err = cn.bw.Flush()
	}
	if err != nil {
		if perr := cn.answeredBeforeClose(err); perr != nil {
			err = perr
		}
		_ = nc.Close()
		return nil, err
	}
	return cn, nil
}

func (cn *conn) close() error {
	cn.closeOnce.Do(func() { cn.closeErr = cn.nc.Close() })
	return cn.closeErr
}

// reusable reports whether the connection can carry another call.
func (cn *conn) reusable() bool {
	return !cn.broken && !cn.goingAway && cn.nextID < maxStreamID
}

// sound reports whether an idle connection can carry a call: the server has not closed it, and what it
// sent meanwhile (pings, settings, GOAWAY) is read and answered.
func (cn *conn) sound() bool {
	for cn.reusable() {
		if cn.br.Buffered() == 0 {
			pending, ok := cn.peek()
			if !ok {
				return false
			}
			if !pending {
				return true
			}
		}
		_ = cn.nc.SetReadDeadline(time.Now().Add(drainTimeout))
		err := cn.readFrame(nil)
		_ = cn.nc.SetReadDeadline(time.Time{})
		if err != nil {
			return false
		}
	}
	return false
}

// peek looks at the socket without blocking: pending is true when the server sent something, ok is
// false when it closed the connection.
func (cn *conn) peek() (pending, ok bool) {
	if cn.raw == nil {
		return false, true
	}
	var n int
	var rerr error
	err := cn.raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return true
	})
	switch {
	case err != nil:
		return false, false
	case errors.Is(rerr, unix.EAGAIN):
		return false, true
	case rerr != nil, n == 0:
		return false, false
	}
	return true, true
}

// stream is the state of the call in flight.
type stream struct {
	id          uint32
	deadline    time.Time
	sendWindow  int64
	recvUnacked uint32
	gotHeaders  bool
	done        bool
	// httpStatus is the :status of an answer that is not gRPC's 200.
	httpStatus string
	st         *status.Status
	// protocol is set when st is the client's verdict on a malformed answer, not the server's status.
	protocol bool
	body     []byte
}

// call makes one call. Errors are gRPC statuses or an *unprocessedError; after a transport error the
// connection is marked broken.
func (cn *conn) call(ctx context.Context, method string, req, resp proto.Message) error {
	// Ending ctx ends the read or write in progress; no timer and no goroutine per call.
	stop := context.AfterFunc(ctx, func() { _ = cn.nc.SetDeadline(time.Unix(1, 0)) })
	err := cn.roundTrip(ctx, method, req, resp)
	if !stop() {
		// The deadline is set or about to be: the connection can carry nothing more.
		cn.broken = true
	}
	var te *transportError
	if errors.As(err, &te) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return status.FromContextError(ctxErr).Err()
		}
		return status.Errorf(codes.Unavailable, "connection to the server lost: %v", te.err)
	}
	return err
}

func (cn *conn) roundTrip(ctx context.Context, method string, req, resp proto.Message) error {
	// The message as gRPC frames it: a byte saying it is not compressed, then its length.
	buf, err := proto.MarshalOptions{}.MarshalAppend(append(cn.msg[:0], 0, 0, 0, 0, 0), req)
	if err != nil {
		return status.Errorf(codes.Internal, "marshal the request: %v", err)
	}
	if len(buf)-5 > maxMessage {
		return status.Errorf(codes.ResourceExhausted, "request of %d bytes is over the limit of %d", len(buf)-5, maxMessage)
	}
	binary.BigEndian.PutUint32(buf[1:5], uint32(len(buf)-5))
	if cap(buf) <= keepBuffer {
		cn.msg = buf
	}
	st := &stream{id: cn.nextID, sendWindow: cn.peerWindow}
	st.deadline, _ = ctx.Deadline()
	cn.nextID += 2
	for _, d := range cn.pingAcks {
		if err := cn.fr.WritePing(true, d); err != nil {
			return cn.writeFailed(err)
		}
	}
	cn.pingAcks = cn.pingAcks[:0]
	if err := cn.writeHeaders(ctx, st.id, method); err != nil {
		return err
	}
	if err := cn.writeData(st, buf); err != nil {
		return err
	}
	if err := cn.bw.Flush(); err != nil {
		return cn.writeFailed(err)
	}
	for !st.done {
		if err := cn.readFrame(st); err != nil {
			return err
		}
	}
	return st.result(resp)
}

func (cn *conn) writeHeaders(ctx context.Context, id uint32, method string) error {
	cn.hbuf.Reset()
	field := func(name, value string) {
		// Writes to a bytes.Buffer, which cannot fail.
		_ = cn.henc.WriteField(hpack.HeaderField{Name: name, Value: value})
	}
	field(":method", "POST")
	field(":scheme", "http")
	field(":path", method)
	field(":authority", "localhost")
	field("content-type", "application/grpc")
	field("te", "trailers")
	field("user-agent", userAgent)
	if deadline, ok := ctx.Deadline(); ok {
		field("grpc-timeout", encodeTimeout(time.Until(deadline)))
	}
	if uint32(cn.hbuf.Len()) > cn.maxFrame {
		return status.Errorf(codes.Internal, "request headers of %d bytes do not fit a frame of %d", cn.hbuf.Len(), cn.maxFrame)
	}
	if err := cn.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: cn.hbuf.Bytes(), EndHeaders: true}); err != nil {
		return cn.writeFailed(err)
	}
	return nil
}

// writeData sends the message within the server's frame size and windows, waiting for the server to
// grant more window when they are spent.
func (cn *conn) writeData(st *stream, data []byte) error {
	for !st.done {
		n := min(int64(len(data)), int64(cn.maxFrame), st.sendWindow, cn.sendWindow)
		if n <= 0 {
			if err := cn.bw.Flush(); err != nil {
				return cn.writeFailed(err)
			}
			if err := cn.readFrame(st); err != nil {
				return err
			}
			continue
		}
		end := n == int64(len(data))
		if err := cn.fr.WriteData(st.id, end, data[:n]); err != nil {
			return cn.writeFailed(err)
		}
		data = data[n:]
		st.sendWindow -= n
		cn.sendWindow -= n
		if end {
			return nil
		}
	}
	// The server answered before it took the whole request.
	return nil
}

// readFrame reads one frame and acts on it; st is nil while the connection is idle.
func (cn *conn) readFrame(st *stream) error {
	f, err := cn.fr.ReadFrame()
	if err != nil {
		var se http2.StreamError
		if errors.As(err, &se) && st != nil && se.StreamID == st.id {
			cn.broken = true
			st.done = true
			return protocolErrorf("malformed answer from the server: %v", se)
		}
		if perr := cn.protocolFailure(err); perr != nil {
			cn.broken = true
			return perr
		}
		return cn.fail(err)
	}
	if !cn.prefaced {
		if err := cn.preface(f); err != nil {
			cn.broken = true
			return err
		}
	}
	mine := st != nil && f.Header().StreamID == st.id
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := f.ForeachSetting(func(s http2.Setting) error { return cn.apply(s, st) }); err != nil {
			return cn.fail(err)
		}
		if err := cn.fr.WriteSettingsAck(); err != nil {
			return cn.writeFailed(err)
		}
		if err := cn.bw.Flush(); err != nil {
			return cn.writeFailed(err)
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			cn.pingAcks = append(cn.pingAcks, f.Data)
		}
	case *http2.WindowUpdateFrame:
		switch {
		case f.StreamID == 0:
			cn.sendWindow += int64(f.Increment)
		case mine:
			st.sendWindow += int64(f.Increment)
		}
	case *http2.GoAwayFrame:
		cn.goingAway = true
		if st != nil && f.LastStreamID < st.id {
			cn.broken = true
			st.done = true
			return &unprocessedError{st: status.Newf(codes.Unavailable, "the server is going away (%v) and did not take the call", f.ErrCode)}
		}
	case *http2.RSTStreamFrame:
		if mine {
			st.done = true
			return st.resetError(f.ErrCode)
		}
	case *http2.MetaHeadersFrame:
		if mine {
			return st.headers(cn, f)
		}
	case *http2.DataFrame:
		return cn.data(st, mine, f)
	case *http2.PushPromiseFrame:
		return cn.fail(errors.New("the server pushed a stream, which the client disabled"))
	}
	return nil
}

func (cn *conn) apply(s http2.Setting, st *stream) error {
	if err := s.Valid(); err != nil {
		return err
	}
	switch s.ID {
	case http2.SettingMaxFrameSize:
		cn.maxFrame = s.Val
	case http2.SettingInitialWindowSize:
		delta := int64(s.Val) - cn.peerWindow
		cn.peerWindow = int64(s.Val)
		if st != nil {
			st.sendWindow += delta
		}
	case http2.SettingHeaderTableSize:
		cn.henc.SetMaxDynamicTableSizeLimit(s.Val)
	}
	return nil
}

// data takes a DATA frame: the answer's bytes when it is the call's, and window to give back either way.
func (cn *conn) data(st *stream, mine bool, f *http2.DataFrame) error {
	n := f.Header().Length
	cn.recvUnacked += n
	if mine {
		st.recvUnacked += n
		st.body = append(st.body, f.Data()...)
		if len(st.body) > maxMessage+5 {
			cn.broken = true
			st.done = true
			return status.Errorf(codes.ResourceExhausted, "answer over the limit of %d bytes", maxMessage)
		}
		if f.StreamEnded() {
			st.done = true
			return protocolErrorf("the server ended the answer without a gRPC status")
		}
	}
	var flush bool
	if cn.recvUnacked >= window/2 {
		if err := cn.fr.WriteWindowUpdate(0, cn.recvUnacked); err != nil {
			return cn.writeFailed(err)
		}
		cn.recvUnacked, flush = 0, true
	}
	if mine && st.recvUnacked >= window/2 {
		if err := cn.fr.WriteWindowUpdate(st.id, st.recvUnacked); err != nil {
			return cn.writeFailed(err)
		}
		st.recvUnacked, flush = 0, true
	}
	if flush {
		if err := cn.bw.Flush(); err != nil {
			return cn.writeFailed(err)
		}
	}
	return nil
}

// headers takes the answer's headers, or its trailers, which carry the gRPC status.
func (st *stream) headers(cn *conn, f *http2.MetaHeadersFrame) error {
	if !st.gotHeaders {
		st.gotHeaders = true
		if s := f.PseudoValue("status"); s != "200" {
			st.httpStatus = s
		} else if ct := header(f, "content-type"); !strings.HasPrefix(ct, "application/grpc") {
			st.httpStatus = "200 with content-type " + strconv.Quote(ct)
		}
		if st.httpStatus != "" && !f.StreamEnded() {
			// Not a gRPC answer: stop reading it.
			cn.broken = true
			st.done = true
			st.st = httpStatus(st.httpStatus)
			return nil
		}
	} else if !f.StreamEnded() {
		cn.broken = true
		st.done = true
		return protocolErrorf("the server sent a second header block that does not end the answer")
	}
	if !f.StreamEnded() {
		return nil
	}
	st.done = true
	code := header(f, "grpc-status")
	if code == "" {
		if st.httpStatus != "" {
			st.st = httpStatus(st.httpStatus)
		} else {
			st.st, st.protocol = status.New(codes.Internal, "the server's answer has no grpc-status"), true
		}
		return nil
	}
	c, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		st.st, st.protocol = status.Newf(codes.Internal, "the server's answer has a malformed grpc-status %q", code), true
		return nil
	}
	st.st = status.New(codes.Code(c), decodeMessage(header(f, "grpc-message")))
	return nil
}

// header is the value of a regular header field, "" when it is absent.
func header(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// result reads the answer into resp, or returns the server's error.
func (st *stream) result(resp proto.Message) error {
	if st.st == nil {
		return protocolErrorf("the answer ended without a status")
	}
	if st.protocol {
		return &ProtocolError{st: st.st}
	}
	if st.st.Code() != codes.OK {
		return st.st.Err()
	}
	if len(st.body) < 5 {
		return protocolErrorf("the server's answer carries no message")
	}
	if st.body[0] != 0 {
		return protocolErrorf("the server compressed its answer, which the client did not ask for")
	}
	if n := binary.BigEndian.Uint32(st.body[1:5]); int(n) != len(st.body)-5 {
		return protocolErrorf("the server's answer says %d bytes and carries %d", n, len(st.body)-5)
	}
	if err := proto.Unmarshal(st.body[5:], resp); err != nil {
		return protocolErrorf("the answer does not decode as %s: %v", resp.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// transportError is a failure of the connection; call turns it into a status.
type transportError struct{ err error }

func (e *transportError) Error() string { return e.err.Error() }

func (cn *conn) fail(err error) error {
	cn.broken = true
	return &transportError{err: err}
}

// writeFailed is fail for a write: a server that closed the connection took nothing from it, unless
// what it said before closing was not HTTP/2.
func (cn *conn) writeFailed(err error) error {
	cn.broken = true
	if perr := cn.answeredBeforeClose(err); perr != nil {
		return perr
	}
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return &unprocessedError{st: status.Newf(codes.Unavailable, "the server closed the connection: %v", err)}
	}
	return &transportError{err: err}
}

// preface checks the server's first frame, which HTTP/2 requires to be SETTINGS.
func (cn *conn) preface(f http2.Frame) error {
	if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
		cn.prefaced = true
		return nil
	}
	return protocolErrorf("the server's first HTTP/2 frame is %v, not SETTINGS", f.Header().Type)
}

// protocolFailure is the ProtocolError a failed read means, or nil when it means the connection is
// gone: bytes that do not make the server's preface, or frames that break HTTP/2.
func (cn *conn) protocolFailure(err error) error {
	var ce http2.ConnectionError
	switch {
	case !cn.prefaced && cn.in.n > 0:
		return protocolErrorf("the server's first bytes are not HTTP/2 (%v)", err)
	case errors.Is(err, http2.ErrFrameTooLarge), errors.As(err, &ce):
		return protocolErrorf("the server broke HTTP/2: %v", err)
	}
	return nil
}

// answeredBeforeClose reads, when a write failed because the server closed the connection before its
// preface, what it had sent: a server that answers garbage and hangs up is broken, not down. It returns
// the ProtocolError, or nil when the server sent nothing or a SETTINGS frame.
func (cn *conn) answeredBeforeClose(err error) error {
	if cn.prefaced || !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	_ = cn.nc.SetReadDeadline(time.Now().Add(drainTimeout))
	f, rerr := cn.fr.ReadFrame()
	if rerr != nil {
		return cn.protocolFailure(rerr)
	}
	return cn.preface(f)
}

// resetError is the status of a stream the server reset, as grpc-go maps HTTP/2 error codes.
func (st *stream) resetError(code http2.ErrCode) error {
	msg := fmt.Sprintf("the server reset the call (%v)", code)
	switch code {
	case http2.ErrCodeRefusedStream:
		return &unprocessedError{st: status.New(codes.Unavailable, msg)}
	case http2.ErrCodeCancel:
		// The server's clock ran out on the grpc-timeout it was sent, just before the client's did.
		if !st.deadline.IsZero() && !time.Now().Before(st.deadline.Add(-time.Millisecond)) {
			return status.Error(codes.DeadlineExceeded, msg)
		}
		return status.Error(codes.Canceled, msg)
	case http2.ErrCodeEnhanceYourCalm:
		return status.Error(codes.ResourceExhausted, msg)
	case http2.ErrCodeInadequateSecurity:
		return status.Error(codes.PermissionDenied, msg)
	}
	return status.Error(codes.Internal, msg)
}

// httpStatus is the gRPC status of an HTTP answer that is not gRPC's, as the gRPC spec maps them.
func httpStatus(s string) *status.Status {
	code := codes.Unknown
	switch s {
	case "400":
		code = codes.Internal
	case "401":
		code = codes.Unauthenticated
	case "403":
		code = codes.PermissionDenied
	case "404":
		code = codes.Unimplemented
	case "429", "502", "503", "504":
		code = codes.Unavailable
	}
	return status.Newf(code, "the server answered HTTP %s, not gRPC", s)
}

// encodeTimeout writes d as a grpc-timeout value: at most eight digits and a unit, rounded up.
func encodeTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if v := (d-1)/u.d + 1; v <= 99999999 {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return strconv.FormatInt(int64(min((d-1)/time.Hour+1, 99999999)), 10) + "H"
}

// decodeMessage undoes the percent-encoding of grpc-message; a malformed one is kept as sent.
func decodeMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}
