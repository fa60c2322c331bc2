package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// readTar returns a tarball's regular files and every header, by name.
func readTar(t *testing.T, b []byte) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
	}
}

// blob reads a descriptor's blob from the layout and checks its digest and size.
func blob(t *testing.T, files map[string][]byte, d Descriptor) []byte {
	t.Helper()
	b, ok := files[BlobPath(d)]
	if !ok {
		t.Fatalf("layout lacks blob %s", d.Digest)
	}
	sum := sha256.Sum256(b)
	if d.Digest != "sha256:"+hex.EncodeToString(sum[:]) || d.Size != int64(len(b)) {
		t.Fatalf("blob %s: content has digest %x and size %d, descriptor says %s/%d", BlobPath(d), sum, len(b), d.Digest, d.Size)
	}
	return b
}

func TestWrite(t *testing.T) {
	t.Parallel()
	layer, err := Layer([]Entry{
		{Name: "etc", Type: Dir, Mode: 0o755},
		{Name: "etc/passwd", Type: File, Mode: 0o644, Data: []byte("nonroot:x:65532:65532::/:/sbin/nologin\n")},
		{Name: "app", Type: File, Mode: 0o755, Data: []byte("\x7fELF...")},
		{Name: "bin/app", Type: Symlink, Link: "../app", Mode: 0o777},
	})
	if err != nil {
		t.Fatal(err)
	}
	img := Image{
		Name:   "ghcr.io/example/app:v1.2.3",
		Arch:   "arm64",
		Config: Config{Entrypoint: []string{"/app"}, User: "65532:65532"},
		Layers: [][]byte{layer},
	}
	var out bytes.Buffer
	if err := Write(&out, img); err != nil {
		t.Fatal(err)
	}
	files, headers := readTar(t, out.Bytes())
	for name, h := range headers {
		if !h.ModTime.Equal(Epoch()) {
			t.Errorf("%s has mtime %v, want the fixed epoch", name, h.ModTime)
		}
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	var index struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Manifests     []Descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	if index.SchemaVersion != 2 || index.MediaType != MediaTypeIndex || len(index.Manifests) != 1 {
		t.Fatalf("index.json = %+v", index)
	}
	md := index.Manifests[0]
	if md.Annotations["io.containerd.image.name"] != img.Name || md.Annotations["org.opencontainers.image.ref.name"] != "v1.2.3" {
		t.Errorf("manifest annotations %v, want the image name for containerd and the tag", md.Annotations)
	}
	if md.Platform == nil || md.Platform.Architecture != "arm64" || md.Platform.OS != "linux" {
		t.Errorf("manifest platform %+v, want linux/arm64", md.Platform)
	}
	var manifest struct {
		MediaType string       `json:"mediaType"`
		Config    Descriptor   `json:"config"`
		Layers    []Descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(t, files, md), &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.MediaType != MediaTypeManifest || manifest.Config.MediaType != MediaTypeConfig || len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != MediaTypeLayer {
		t.Fatalf("manifest = %+v", manifest)
	}
	var config struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       Config `json:"config"`
		RootFS       struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(t, files, manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if config.Architecture != "arm64" || config.OS != "linux" || config.Config.User != "65532:65532" ||
		len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/app" {
		t.Errorf("image config = %+v", config)
	}
	if config.RootFS.Type != "layers" || len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Errorf("rootfs %+v, want the uncompressed layer's digest as its diff ID", config.RootFS)
	}
	layerFiles, layerHeaders := readTar(t, blob(t, files, manifest.Layers[0]))
	if string(layerFiles["app"]) != "\x7fELF..." || layerHeaders["app"].Mode != 0o755 || layerHeaders["app"].Uid != 0 {
		t.Errorf("layer's app: %q %+v", layerFiles["app"], layerHeaders["app"])
	}
	if h := layerHeaders["etc/"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("layer's etc/ = %+v, want a directory (a trailing slash added)", h)
	}
	if h := layerHeaders["bin/app"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../app" {
		t.Errorf("layer's bin/app = %+v, want a symlink to ../app", h)
	}

	var again bytes.Buffer
	if err := Write(&again, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), again.Bytes()) {
		t.Error("two writes of one image differ: its digest would change with every build")
	}
}

func TestWriteRefuses(t *testing.T) {
	t.Parallel()
	layer, _ := Layer([]Entry{{Name: "a", Type: File, Mode: 0o644}})
	tests := []struct {
		name string
		img  Image
		want string
	}{
		{"no tag", Image{Name: "ghcr.io/example/app", Layers: [][]byte{layer}}, "tag"},
		{"registry port, no tag", Image{Name: "localhost:5000/app", Layers: [][]byte{layer}}, "tag"},
		{"no layer", Image{Name: "ghcr.io/example/app:v1"}, "no layers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Write(io.Discard, tc.img)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write = %v, want an error about %q", err, tc.want)
			}
		})
	}
	if _, err := Layer([]Entry{{Name: "dev/null", Type: EntryType('3')}}); err == nil {
		t.Error("Layer took a device node")
	}
}
