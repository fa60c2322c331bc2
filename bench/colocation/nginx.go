package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tandemkit/tandem/e2e/framework"
	"github.com/tandemkit/tandem/internal/ociimage"
)

// The LS services bench/colocation can run: its own Go server, which burns -work of CPU and reads
// -touch of its working set per request, or nginx from Debian's package serving a static page, a
// real server whose cost per request is its own.
const (
	lsGo    = "go"
	lsNginx = "nginx"
)

// nginxImage is built from Debian's nginx package on each run (the machines here cannot pull).
const nginxImage = "docker.io/library/tandem-bench-nginx:1"

// nginxPageBytes is the size of the page nginx serves: a small page, as a service's API answer.
const nginxPageBytes = 4 << 10

// nginxConf runs one worker in the foreground, as one container process: one worker is what a
// pod with a request of a fraction of a CPU would be configured with, and nginx's master process
// only forks and watches it.
func nginxConf(addr string) string {
	return `daemon off;
master_process off;
worker_processes 1;
error_log stderr warn;
pid /tmp/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path /tmp/client_body;
  proxy_temp_path /tmp/proxy;
  fastcgi_temp_path /tmp/fastcgi;
  uwsgi_temp_path /tmp/uwsgi;
  scgi_temp_path /tmp/scgi;
  server {
    listen ` + addr + `;
    location / { root /www; index index.html; }
  }
}
`
}

// nginxCommand is the server container's command.
func nginxCommand() []string {
	return []string{"/usr/sbin/nginx", "-c", "/etc/nginx/nginx.conf", "-e", "stderr"}
}

// importNginx builds nginxImage for a server listening on addr and imports it into the bench's
// containerd, waiting until CRI lists it.
func (b *bench) importNginx(ctx context.Context) error {
	bin, err := nginxBinary(ctx, filepath.Join(framework.CacheDir(), "nginx"))
	if err != nil {
		return err
	}
	tarball, err := buildNginxImage(ctx, bin, b.addr, filepath.Join(b.dir, "nginx-image"))
	if err != nil {
		return err
	}
	return b.ctrd.ImportImage(ctx, tarball, nginxImage)
}

// nginxBinary returns Debian's nginx binary, downloaded and unpacked under cache once. The package
// is unpacked rather than installed: installing it would start a system nginx on port 80.
func nginxBinary(ctx context.Context, cache string) (string, error) {
	bin := filepath.Join(cache, "root", "usr", "sbin", "nginx")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", fmt.Errorf("create nginx cache: %w", err)
	}
	dl := exec.CommandContext(ctx, "apt-get", "download", "nginx")
	dl.Dir = cache
	if out, err := dl.CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get download nginx (run apt-get update first if the package is not found): %w: %s", err, out)
	}
	debs, err := filepath.Glob(filepath.Join(cache, "nginx_*.deb"))
	if err != nil || len(debs) == 0 {
		return "", fmt.Errorf("apt-get download nginx left no nginx_*.deb in %s", cache)
	}
	slices.Sort(debs)
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[len(debs)-1], filepath.Join(cache, "root")).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack %s: %w: %s", debs[len(debs)-1], err, out)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the nginx package has no usr/sbin/nginx: %w", err)
	}
	return bin, nil
}

// buildNginxImage writes nginxImage into dir: the binary, the shared libraries ldd finds for it on
// this machine (Debian's nginx depends on them, so they are here), a config listening on addr and
// a page, and returns the tarball's path.
func buildNginxImage(ctx context.Context, bin, addr, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return "", fmt.Errorf("ldd %s: %w", bin, err)
	}
	libs, err := lddPaths(out)
	if err != nil {
		return "", err
	}
	files := map[string][]byte{}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("read nginx: %w", err)
	}
	files["usr/sbin/nginx"] = data
	for _, l := range libs {
		data, err := os.ReadFile(l) // follows the symlink to the library itself
		if err != nil {
			return "", fmt.Errorf("read %s, a library of nginx: %w", l, err)
		}
		files[strings.TrimPrefix(l, "/")] = data
	}
	files["etc/nginx/nginx.conf"] = []byte(nginxConf(addr))
	files["etc/passwd"] = []byte("root:x:0:0:root:/root:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n")
	files["etc/group"] = []byte("root:x:0:\nnogroup:x:65534:\n")
	files["www/index.html"] = bytes.Repeat([]byte("tandem colocation bench page\n"), nginxPageBytes/29+1)[:nginxPageBytes]

	dirs := map[string]bool{"tmp/": true, "proc/": true, "sys/": true, "dev/": true}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	var entries []ociimage.Entry
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		entries = append(entries, ociimage.Entry{Name: d, Type: ociimage.Dir, Mode: mode})
	}
	slices.Sort(names)
	for _, name := range names {
		mode := int64(0o644)
		if name == "usr/sbin/nginx" || strings.Contains(name, ".so") {
			mode = 0o755
		}
		entries = append(entries, ociimage.Entry{Name: name, Type: ociimage.File, Mode: mode, Data: files[name]})
	}
	layer, err := ociimage.Layer(entries)
	if err != nil {
		return "", fmt.Errorf("nginx image layer: %w", err)
	}
	var buf bytes.Buffer
	if err := ociimage.Write(&buf, ociimage.Image{
		Name:   nginxImage,
		Config: ociimage.Config{Entrypoint: nginxCommand(), WorkingDir: "/"},
		Layers: [][]byte{layer},
	}); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create image dir: %w", err)
	}
	tarball := filepath.Join(dir, "nginx.oci.tar")
	if err := os.WriteFile(tarball, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write the nginx image: %w", err)
	}
	return tarball, nil
}

// lddPaths returns the absolute paths of the libraries in ldd's output: "name => /path (addr)"
// and the loader's "/path (addr)"; the vDSO has no file.
func lddPaths(out []byte) ([]string, error) {
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if _, after, ok := strings.Cut(line, "=>"); ok {
			line = strings.TrimSpace(after)
		}
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("ldd: a library of nginx is missing on this machine (%s): apt-get install nginx's dependencies", line)
		}
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], "/") {
			paths = append(paths, f[0])
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("ldd listed no library: %q", out)
	}
	return paths, nil
}
