package framework

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// TestImage is the image every e2e container runs: a static busybox with its
// applet links plus /pause, a static Go binary that is the image's entrypoint.
const TestImage = "docker.io/library/tandem-e2e:1"

// SandboxImage is the pod sandbox ("pause") image the harness configures.
const SandboxImage = TestImage

// busyboxPath is where Debian's busybox-static puts its binary.
const busyboxPath = "/bin/busybox"

// imageEpoch keeps layer bytes, and so the image's digest, stable across builds.
func imageEpoch() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) }

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *ociPlatform      `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociPlatform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// BuildTestImage writes TestImage as an OCI image-layout tarball into dir and
// returns its path, ready for `ctr images import`. The registry-less machines
// this runs on cannot pull, so the image is assembled from the host's static
// busybox and a freshly built pause binary.
func BuildTestImage(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create image dir: %w", err)
	}
	pause := filepath.Join(dir, "pause")
	if err := buildPause(ctx, pause); err != nil {
		return "", err
	}
	busybox, err := os.ReadFile(busyboxPath)
	if err != nil {
		return "", fmt.Errorf("read %s (install busybox-static): %w", busyboxPath, err)
	}
	list, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return "", fmt.Errorf("list busybox applets: %w", err)
	}
	pauseBin, err := os.ReadFile(pause)
	if err != nil {
		return "", fmt.Errorf("read pause binary: %w", err)
	}

	layer, err := imageLayer(busybox, pauseBin, strings.Fields(string(list)))
	if err != nil {
		return "", err
	}
	layerDesc := blobDescriptor("application/vnd.oci.image.layer.v1.tar", layer)

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      imageEpoch().Format(time.RFC3339),
		"config": map[string]any{
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"Entrypoint": []string{"/pause"},
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return "", fmt.Errorf("encode image config: %w", err)
	}
	configDesc := blobDescriptor("application/vnd.oci.image.config.v1+json", config)

	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []ociDescriptor{layerDesc},
	})
	if err != nil {
		return "", fmt.Errorf("encode image manifest: %w", err)
	}
	manifestDesc := blobDescriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Platform = &ociPlatform{Architecture: runtime.GOARCH, OS: "linux"}
	manifestDesc.Annotations = map[string]string{
		// containerd names the imported image after this annotation.
		"io.containerd.image.name":          TestImage,
		"org.opencontainers.image.ref.name": TestImage[strings.LastIndex(TestImage, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []ociDescriptor{manifestDesc},
	})
	if err != nil {
		return "", fmt.Errorf("encode image index: %w", err)
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(manifestDesc), manifest},
		{blobPath(configDesc), config},
		{blobPath(layerDesc), layer},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: imageEpoch()}); err != nil {
			return "", fmt.Errorf("write image tarball: %w", err)
		}
	}
	for _, f := range files {
		if err := writeFile(tw, f.name, 0o644, f.data); err != nil {
			return "", fmt.Errorf("write image tarball: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("write image tarball: %w", err)
	}
	out := filepath.Join(dir, "tandem-e2e.oci.tar")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write image tarball: %w", err)
	}
	return out, nil
}

// imageLayer returns the uncompressed root filesystem layer of the test image.
func imageLayer(busybox, pause []byte, applets []string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]int64{"bin/": 0o755, "dev/": 0o755, "etc/": 0o755, "proc/": 0o555, "root/": 0o700, "sys/": 0o555, "tmp/": 0o1777, "var/": 0o755}
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "root/", "sys/", "tmp/", "var/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: dirs[d], ModTime: imageEpoch()}); err != nil {
			return nil, fmt.Errorf("write image layer: %w", err)
		}
	}
	if err := writeFile(tw, "bin/busybox", 0o755, busybox); err != nil {
		return nil, fmt.Errorf("write image layer: %w", err)
	}
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: imageEpoch()}); err != nil {
			return nil, fmt.Errorf("write image layer: %w", err)
		}
	}
	// A slice, not a map: the entries' order is part of the layer's digest.
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"etc/group", []byte("root:x:0:\nnogroup:x:65534:\n")},
		{"etc/passwd", []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
	} {
		if err := writeFile(tw, f.name, 0o644, f.data); err != nil {
			return nil, fmt.Errorf("write image layer: %w", err)
		}
	}
	if err := writeFile(tw, "pause", 0o755, pause); err != nil {
		return nil, fmt.Errorf("write image layer: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write image layer: %w", err)
	}
	return buf.Bytes(), nil
}

func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: imageEpoch()}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func blobDescriptor(mediaType string, data []byte) ociDescriptor {
	sum := sha256.Sum256(data)
	return ociDescriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d ociDescriptor) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}
