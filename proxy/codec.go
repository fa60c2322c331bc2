package proxy

import (
	"fmt"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	// The proto codec must be registered before codec falls back to it.
	_ "google.golang.org/grpc/encoding/proto"
)

// frame is one undecoded gRPC message. It holds a reference on the received buffers, which the send of
// the same frame hands back to gRPC, so a relayed message is never copied.
type frame struct {
	data mem.BufferSlice
}

// free releases the frame's buffers when it will not be sent.
func (f *frame) free() {
	f.data.Free()
	f.data = nil
}

// codec relays frames as they are and encodes anything else with the standard proto codec. It is forced
// on the server and on every upstream call, and keeps the name "proto" so the content-type on the wire is
// exactly what kubelet and containerd expect.
type codec struct {
	proto encoding.CodecV2
}

func newCodec() (*codec, error) {
	p := encoding.GetCodecV2("proto")
	if p == nil {
		return nil, fmt.Errorf("grpc proto codec is not registered: %w", errdefs.ErrInternal)
	}
	return &codec{proto: p}, nil
}

func (c *codec) Name() string { return "proto" }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*frame); ok {
		// Ownership of the reference passes to gRPC, which frees it once written.
		d := f.data
		f.data = nil
		return d, nil
	}
	if _, ok := v.(proto.Message); !ok {
		return nil, fmt.Errorf("codec cannot marshal %T: %w", v, errdefs.ErrInternal)
	}
	return c.proto.Marshal(v)
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*frame); ok {
		data.Ref()
		f.data = data
		return nil
	}
	return c.proto.Unmarshal(data, v)
}
