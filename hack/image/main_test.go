package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemkit/tandem/internal/ociimage"
)

// buildStatic builds a small Go program with CGO_ENABLED=0, as `make images` builds the real
// binaries.
func buildStatic(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello\\n\") }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("cannot build a test binary here: %v: %s", err, out)
	}
	return bin
}

func TestImage(t *testing.T) {
	bin := buildStatic(t)
	out := filepath.Join(t.TempDir(), "images", "hello.tar")
	var stdout bytes.Buffer
	if err := run([]string{"--binary", bin, "--name", "ghcr.io/tandemkit/hello:v9", "--out", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	files := untar(t, b)
	var index struct{ Manifests []ociimage.Descriptor }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %+v", err, index)
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != "ghcr.io/tandemkit/hello:v9" {
		t.Errorf("image name %q", got)
	}
	var manifest struct {
		Config ociimage.Descriptor
		Layers []ociimage.Descriptor
	}
	if err := json.Unmarshal(files[ociimage.BlobPath(index.Manifests[0])], &manifest); err != nil {
		t.Fatal(err)
	}
	var config struct{ Config ociimage.Config }
	if err := json.Unmarshal(files[ociimage.BlobPath(manifest.Config)], &config); err != nil {
		t.Fatal(err)
	}
	if config.Config.User != "65532:65532" || strings.Join(config.Config.Entrypoint, " ") != "/hello" {
		t.Errorf("config %+v, want user 65532:65532 and entrypoint /hello", config.Config)
	}
	layer := untar(t, files[ociimage.BlobPath(manifest.Layers[0])])
	want, _ := os.ReadFile(bin)
	if !bytes.Equal(layer["hello"], want) {
		t.Error("the layer's /hello is not the binary")
	}
	if !strings.Contains(string(layer["etc/passwd"]), ":65532:65532:") {
		t.Errorf("etc/passwd %q names no user 65532", layer["etc/passwd"])
	}

	// The same binary gives the same bytes.
	again := filepath.Join(t.TempDir(), "hello.tar")
	if err := run([]string{"--binary", bin, "--name", "ghcr.io/tandemkit/hello:v9", "--out", again}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(again); !bytes.Equal(b, b2) {
		t.Error("two builds of one image differ")
	}
}

func TestImageRefusesDynamic(t *testing.T) {
	// Debian's /bin/sh is dash, linked against libc.
	bin, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skipf("no /bin/sh: %v", err)
	}
	err = run([]string{"--binary", bin, "--name", "ghcr.io/tandemkit/sh:v1", "--out", filepath.Join(t.TempDir(), "sh.tar")}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("run on %s = %v, want a refusal naming CGO_ENABLED=0", bin, err)
	}
}

func untar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			files[h.Name], _ = io.ReadAll(tr)
		}
	}
}
