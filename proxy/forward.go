package proxy

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// outgoing carries the caller's metadata to the runtime. gRPC drops the reserved and pseudo headers
// itself, so what kubelet sent arrives as it was, and the caller's deadline travels in ctx.
func outgoing(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ctx
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// relayUnary forwards a call known to be unary: one request frame, one response frame. It avoids the
// goroutine and stream set-up that relayStream needs, which matters on the List calls kubelet makes
// every second.
func (s *Server) relayUnary(stream grpc.ServerStream, conn *grpc.ClientConn, method string) error {
	var in, out frame
	if err := stream.RecvMsg(&in); err != nil {
		return err
	}
	var header, trailer metadata.MD
	err := conn.Invoke(outgoing(stream.Context()), method, &in, &out,
		grpc.ForceCodecV2(s.codec), grpc.Header(&header), grpc.Trailer(&trailer))
	if in.data != nil {
		// The request was never written (the call failed before sending).
		in.free()
	}
	if len(header) > 0 {
		if herr := stream.SetHeader(header); herr != nil && err == nil {
			return herr
		}
	}
	stream.SetTrailer(trailer)
	if err != nil {
		return upstreamError(err)
	}
	return stream.SendMsg(&out)
}

// relayStream forwards any call, unary or streaming in either direction, frame by frame. It is used for
// methods the proxy does not know, so nothing about their shape is assumed.
func (s *Server) relayStream(stream grpc.ServerStream, conn *grpc.ClientConn, method string) error {
	ctx, cancel := context.WithCancel(outgoing(stream.Context()))
	defer cancel()
	// Cancel long-lived streams (GetContainerEvents) when the proxy drains, so a graceful stop is not held
	// open by a watcher that never ends on its own.
	stopWatch := context.AfterFunc(s.draining, cancel)
	defer stopWatch()

	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	up, err := conn.NewStream(ctx, desc, method, grpc.ForceCodecV2(s.codec))
	if err != nil {
		return upstreamError(err)
	}

	// Caller → runtime. It ends when the caller half-closes; its error matters only if it is not that.
	sendErr := make(chan error, 1)
	go func() {
		for {
			var f frame
			if err := stream.RecvMsg(&f); err != nil {
				if errors.Is(err, io.EOF) {
					sendErr <- up.CloseSend()
					return
				}
				sendErr <- err
				return
			}
			if err := up.SendMsg(&f); err != nil {
				if f.data != nil {
					f.free()
				}
				// The runtime's real status comes from RecvMsg below; io.EOF here only says the stream ended.
				sendErr <- nil
				return
			}
		}
	}()

	// Runtime → caller, headers first.
	header, err := up.Header()
	if err != nil {
		return upstreamError(err)
	}
	if len(header) > 0 {
		if err := stream.SendHeader(header); err != nil {
			return err
		}
	}
	for {
		var f frame
		err := up.RecvMsg(&f)
		if errors.Is(err, io.EOF) {
			stream.SetTrailer(up.Trailer())
			break
		}
		if err != nil {
			stream.SetTrailer(up.Trailer())
			if s.draining.Err() != nil && status.Code(err) == codes.Canceled {
				return status.Error(codes.Unavailable, "tandem-proxy is shutting down; reconnect to the restarted proxy")
			}
			return upstreamError(err)
		}
		if err := stream.SendMsg(&f); err != nil {
			if f.data != nil {
				f.free()
			}
			return err
		}
	}
	// The runtime finished; the caller side has nothing left to add except an unexpected receive error.
	select {
	case err := <-sendErr:
		if err != nil {
			return err
		}
	default:
	}
	return nil
}

// upstreamError passes the runtime's status through unchanged. Errors that carry no status (rare: a
// local failure inside the client) become Unavailable, since the runtime could not be reached.
func upstreamError(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Errorf(codes.Unavailable, "container runtime: %v", err)
}
