// Command image wraps one static binary into an OCI image-layout tarball that `ctr images
// import` loads, with no base image: the binary, /etc/passwd and /etc/group naming the nonroot
// user 65532, and an empty /tmp. `make images` runs it for each in-cluster binary:
//
//	go run ./hack/image --binary bin/images/tandem-extender \
//	  --name ghcr.io/tandemkit/tandem-extender:v0.1.0 --out bin/images/tandem-extender.tar
//
// A dynamically linked binary is refused: the image has no libc to link it against (build with
// CGO_ENABLED=0).
package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tandemkit/tandem/internal/ociimage"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// nonroot is the user the images run as, matching the manifests' runAsUser.
const nonroot = "65532"

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fs.String("binary", "", "static executable to put in the image (its base name is the entrypoint, /NAME)")
	name := fs.String("name", "", "fully qualified image name with tag, e.g. ghcr.io/tandemkit/tandem-extender:v0.1.0")
	out := fs.String("out", "", "tarball to write")
	arch := fs.String("arch", "", "GOARCH the binary is built for (default: this machine's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *name == "" || *out == "" {
		return errors.New("set --binary, --name and --out")
	}
	if err := checkStatic(*binary); err != nil {
		return err
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return fmt.Errorf("read binary: %w", err)
	}
	base := filepath.Base(*binary)
	layer, err := ociimage.Layer([]ociimage.Entry{
		{Name: "etc/", Type: ociimage.Dir, Mode: 0o755},
		{Name: "etc/group", Type: ociimage.File, Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:" + nonroot + ":\n")},
		{Name: "etc/passwd", Type: ociimage.File, Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + nonroot + ":" + nonroot + ":nonroot:/:/sbin/nologin\n")},
		// Go's os.TempDir; with a read-only root file system a tmpfs goes here.
		{Name: "tmp/", Type: ociimage.Dir, Mode: 0o1777},
		{Name: base, Type: ociimage.File, Mode: 0o755, Data: bin},
	})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	err = ociimage.Write(&buf, ociimage.Image{
		Name: *name,
		Arch: *arch,
		Config: ociimage.Config{
			Entrypoint: []string{"/" + base},
			User:       nonroot + ":" + nonroot,
			WorkingDir: "/",
		},
		Layers: [][]byte{layer},
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return fmt.Errorf("create output directory: %w", err)
	}
	// Through a temporary file, so an interrupted build leaves no half tarball to import.
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	if err := os.Rename(tmp, *out); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	fmt.Fprintf(stdout, "%s: %s (%d MiB)\n", *out, *name, buf.Len()>>20)
	return nil
}

// checkStatic refuses an executable that needs a dynamic loader.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked and the image has no libc: build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}
