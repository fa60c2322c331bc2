package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tandemkit/tandem/internal/ociimage"
)

// TestImage is the image every e2e container runs: a static busybox with its
// applet links plus /pause, a static Go binary that is the image's entrypoint.
const TestImage = "docker.io/library/tandem-e2e:1"

// SandboxImage is the pod sandbox ("pause") image the harness configures.
const SandboxImage = TestImage

// busyboxPath is where Debian's busybox-static puts its binary.
const busyboxPath = "/bin/busybox"

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
	var buf bytes.Buffer
	err = ociimage.Write(&buf, ociimage.Image{
		Name: TestImage,
		Config: ociimage.Config{
			Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Entrypoint: []string{"/pause"},
			WorkingDir: "/",
		},
		Layers: [][]byte{layer},
	})
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "tandem-e2e.oci.tar")
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write image tarball: %w", err)
	}
	return out, nil
}

// imageLayer returns the uncompressed root filesystem layer of the test image.
func imageLayer(busybox, pause []byte, applets []string) ([]byte, error) {
	var entries []ociimage.Entry
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755}, {"proc/", 0o555}, {"root/", 0o700}, {"sys/", 0o555}, {"tmp/", 0o1777}, {"var/", 0o755}} {
		entries = append(entries, ociimage.Entry{Name: d.name, Type: ociimage.Dir, Mode: d.mode})
	}
	entries = append(entries, ociimage.Entry{Name: "bin/busybox", Type: ociimage.File, Mode: 0o755, Data: busybox})
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		entries = append(entries, ociimage.Entry{Name: "bin/" + a, Type: ociimage.Symlink, Link: "busybox", Mode: 0o777})
	}
	entries = append(entries,
		ociimage.Entry{Name: "etc/group", Type: ociimage.File, Mode: 0o644, Data: []byte("root:x:0:\nnogroup:x:65534:\n")},
		ociimage.Entry{Name: "etc/passwd", Type: ociimage.File, Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")},
		ociimage.Entry{Name: "pause", Type: ociimage.File, Mode: 0o755, Data: pause},
	)
	layer, err := ociimage.Layer(entries)
	if err != nil {
		return nil, fmt.Errorf("write image layer: %w", err)
	}
	return layer, nil
}
