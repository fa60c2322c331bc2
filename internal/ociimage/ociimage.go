// Package ociimage writes container images as OCI image-layout tarballs (oci-layout,
// index.json, blobs/sha256/...), the form `ctr images import` loads, from files in memory: no
// base image, no registry, no daemon. Machines that cannot pull (CI, air-gapped nodes) get
// Tandem's images from `make images` this way, and the e2e tests their test image.
//
// Output is deterministic: every timestamp is Epoch and entries are written in the order given,
// so the same inputs always give the same digests.
package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// Epoch is the time of every entry and of the image config: fixed, so builds are reproducible.
func Epoch() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }

// Media types of what Write produces.
const (
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
)

// Entry is one file system entry of a layer.
type Entry struct {
	// Name is the path in the image, relative ("bin/sh"); a directory's ends in "/".
	Name string
	Type EntryType
	Mode int64
	// Data is a regular file's content.
	Data []byte
	// Link is a symlink's target.
	Link string
}

// EntryType says what an Entry is.
type EntryType byte

// The entry types, as tar numbers them.
const (
	File    EntryType = tar.TypeReg
	Dir     EntryType = tar.TypeDir
	Symlink EntryType = tar.TypeSymlink
)

// Layer returns an uncompressed layer holding entries, in their order (which is part of the
// digest). Owners are root.
func Layer(entries []Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Typeflag: byte(e.Type), Name: e.Name, Mode: e.Mode, ModTime: Epoch()}
		switch e.Type {
		case File:
			h.Size = int64(len(e.Data))
		case Symlink:
			h.Linkname = e.Link
		case Dir:
			if !strings.HasSuffix(e.Name, "/") {
				h.Name += "/"
			}
		default:
			return nil, fmt.Errorf("layer entry %s: unknown type %q", e.Name, e.Type)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", e.Name, err)
		}
		if e.Type == File {
			if _, err := tw.Write(e.Data); err != nil {
				return nil, fmt.Errorf("layer entry %s: %w", e.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close layer: %w", err)
	}
	return buf.Bytes(), nil
}

// Config is the run configuration of an image (the OCI image config's "config").
type Config struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	// User is "uid" or "uid:gid"; numeric, so no /etc/passwd lookup is needed.
	User       string `json:"User,omitempty"`
	WorkingDir string `json:"WorkingDir,omitempty"`
}

// Image is what Write writes.
type Image struct {
	// Name is the image's fully qualified reference ("ghcr.io/org/name:tag"); `ctr images
	// import` names the imported image after it.
	Name string
	// Arch is the GOARCH the binaries are built for; empty means runtime.GOARCH.
	Arch   string
	Config Config
	// Layers are uncompressed layers (Layer), bottom first.
	Layers [][]byte
}

// Descriptor is an OCI content descriptor.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *Platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Platform is a manifest's platform in the index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

func descriptor(mediaType string, data []byte) Descriptor {
	sum := sha256.Sum256(data)
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// BlobPath is where a blob lives in the layout.
func BlobPath(d Descriptor) string { return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:") }

// Write writes img as an OCI image-layout tarball to w.
func Write(w io.Writer, img Image) error {
	if len(img.Layers) == 0 {
		return fmt.Errorf("image %s: no layers", img.Name)
	}
	i := strings.LastIndex(img.Name, ":")
	if i < 0 || strings.Contains(img.Name[i:], "/") {
		return fmt.Errorf("image name %q: give a fully qualified name with a tag (registry/repository:tag)", img.Name)
	}
	arch := img.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	var layers []Descriptor
	var diffIDs []string
	for _, l := range img.Layers {
		d := descriptor(MediaTypeLayer, l)
		layers = append(layers, d)
		diffIDs = append(diffIDs, d.Digest) // uncompressed: the layer's digest is its diff ID
	}
	config, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"created":      Epoch().Format(time.RFC3339),
		"config":       img.Config,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return fmt.Errorf("encode image config: %w", err)
	}
	configDesc := descriptor(MediaTypeConfig, config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeManifest,
		"config":        configDesc,
		"layers":        layers,
	})
	if err != nil {
		return fmt.Errorf("encode image manifest: %w", err)
	}
	manifestDesc := descriptor(MediaTypeManifest, manifest)
	manifestDesc.Platform = &Platform{Architecture: arch, OS: "linux"}
	manifestDesc.Annotations = map[string]string{
		// containerd names the imported image after this annotation.
		"io.containerd.image.name":          img.Name,
		"org.opencontainers.image.ref.name": img.Name[i+1:],
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     MediaTypeIndex,
		"manifests":     []Descriptor{manifestDesc},
	})
	if err != nil {
		return fmt.Errorf("encode image index: %w", err)
	}

	entries := []Entry{
		{Name: "blobs/", Type: Dir, Mode: 0o755},
		{Name: "blobs/sha256/", Type: Dir, Mode: 0o755},
		{Name: "oci-layout", Type: File, Mode: 0o644, Data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{Name: "index.json", Type: File, Mode: 0o644, Data: index},
		{Name: BlobPath(manifestDesc), Type: File, Mode: 0o644, Data: manifest},
		{Name: BlobPath(configDesc), Type: File, Mode: 0o644, Data: config},
	}
	seen := map[string]bool{}
	for j, d := range layers {
		if seen[d.Digest] { // two identical layers are one blob
			continue
		}
		seen[d.Digest] = true
		entries = append(entries, Entry{Name: BlobPath(d), Type: File, Mode: 0o644, Data: img.Layers[j]})
	}
	tarball, err := Layer(entries)
	if err != nil {
		return fmt.Errorf("write image %s: %w", img.Name, err)
	}
	if _, err := w.Write(tarball); err != nil {
		return fmt.Errorf("write image %s: %w", img.Name, err)
	}
	return nil
}
