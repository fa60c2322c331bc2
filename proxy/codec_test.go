package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCodecRelaysFramesUnchanged(t *testing.T) {
	t.Parallel()
	c, err := newCodec()
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "proto" {
		t.Fatalf("codec name %q: the content-type on the wire must stay application/grpc+proto", c.Name())
	}
	msg := &runtimeapi.ListContainersResponse{Containers: []*runtimeapi.Container{{Id: "a", Labels: map[string]string{"k": "v"}}}}
	wire, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   mem.BufferSlice
	}{
		{"one buffer", mem.BufferSlice{mem.SliceBuffer(wire)}},
		{"split across buffers", mem.BufferSlice{mem.SliceBuffer(wire[:3]), mem.SliceBuffer(wire[3:])}},
		{"empty message", mem.BufferSlice{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f frame
			if err := c.Unmarshal(tt.in, &f); err != nil {
				t.Fatal(err)
			}
			want := tt.in.Materialize()
			// gRPC frees the received buffers after Unmarshal; the frame must still hold the bytes.
			tt.in.Free()
			out, err := c.Marshal(&f)
			if err != nil {
				t.Fatal(err)
			}
			if got := out.Materialize(); !bytes.Equal(got, want) {
				t.Fatalf("relayed bytes = %x, want %x", got, want)
			}
			if f.data != nil {
				t.Fatal("frame still holds its buffers after Marshal handed them to gRPC")
			}
			out.Free()
		})
	}
}

func TestCodecEncodesMessagesAsProto(t *testing.T) {
	t.Parallel()
	c, _ := newCodec()
	msg := &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "2.4.2"}
	out, err := c.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	var got runtimeapi.VersionResponse
	if err := c.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, msg) {
		t.Fatalf("round trip = %v, want %v", &got, msg)
	}
	if _, err := c.Marshal(struct{}{}); !errdefs.IsInternal(err) {
		t.Fatalf("Marshal(non-proto) = %v, want an Internal error", err)
	}
}

func FuzzCodecFrame(f *testing.F) {
	f.Add([]byte{}, 0)
	f.Add([]byte("\x0a\x03abc"), 2)
	// Lifecycle requests as large as the proxy accepts them, split where the transport may split them.
	big, _ := proto.Marshal(&runtimeapi.CreateContainerRequest{PodSandboxId: "p", Config: &runtimeapi.ContainerConfig{
		Envs: []*runtimeapi.KeyValue{{Key: "BIG", Value: bytes.Repeat([]byte("x"), 256<<10)}}}})
	f.Add(big, 16<<10)
	fat, _ := proto.Marshal(&runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Annotations: map[string]string{"example.com/blob": strings.Repeat("x", 320<<10)}}})
	f.Add(fat, len(fat)/2)
	f.Fuzz(func(t *testing.T, data []byte, split int) {
		c, _ := newCodec()
		slice := func() mem.BufferSlice {
			if split > 0 && split < len(data) {
				return mem.BufferSlice{mem.SliceBuffer(data[:split]), mem.SliceBuffer(data[split:])}
			}
			return mem.BufferSlice{mem.SliceBuffer(data)}
		}
		// What serveIntercepted does with a lifecycle request: any bytes decode or fail, never panic.
		var dec frame
		if err := c.Unmarshal(slice(), &dec); err != nil {
			t.Fatal(err)
		}
		buf := dec.data.MaterializeToBuffer(mem.DefaultBufferPool())
		dec.free()
		if !bytes.Equal(buf.ReadOnlyData(), data) {
			t.Fatal("decoder sees other bytes than were sent")
		}
		_ = proto.Unmarshal(buf.ReadOnlyData(), &runtimeapi.CreateContainerRequest{})
		buf.Free()

		in := slice()
		var fr frame
		if err := c.Unmarshal(in, &fr); err != nil {
			t.Fatal(err)
		}
		out, err := c.Marshal(&fr)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Materialize(), data) {
			t.Fatal("frame changed in transit")
		}
	})
}
