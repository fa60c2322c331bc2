package framework

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// TestConfig renders each flavor's containerd config and checks, on the
// parsed TOML, the settings that the machines and isolation depend on.
func TestConfig(t *testing.T) {
	t.Parallel()
	dir := "/tmp/tdm-e2e-x/ctrd"
	tests := []struct {
		name   string
		flavor string
		want   map[string]any // dotted path → value
	}{
		{
			name:   "1.6",
			flavor: Flavor16,
			want: map[string]any{
				"version":      int64(2),
				"root":         dir + "/root",
				"state":        dir + "/state",
				"grpc.address": dir + "/containerd.sock",
				`plugins.io.containerd.grpc.v1.cri.restrict_oom_score_adj`:                         true,
				`plugins.io.containerd.grpc.v1.cri.sandbox_image`:                                  SandboxImage,
				`plugins.io.containerd.grpc.v1.cri.netns_mounts_under_state_dir`:                   true,
				`plugins.io.containerd.grpc.v1.cri.cni.bin_dir`:                                    "/usr/lib/cni",
				`plugins.io.containerd.grpc.v1.cri.cni.conf_dir`:                                   dir + "/cni/net.d",
				`plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.options.SystemdCgroup`: false,
				`plugins.io.containerd.grpc.v1.cri.containerd.runtimes.runc.options.Root`:          dir + "/runc",
			},
		},
		{
			name:   "2",
			flavor: Flavor2,
			want: map[string]any{
				"version": int64(4),
				"root":    dir + "/root",
				"state":   dir + "/state",
				`plugins.io.containerd.server.v1.grpc.address`:                                        dir + "/containerd.sock",
				`plugins.io.containerd.shim.v1.manager.socket_dir`:                                    dir + "/s",
				`plugins.io.containerd.nri.v1.nri.disable`:                                            true,
				`plugins.io.containerd.cri.v1.runtime.restrict_oom_score_adj`:                         true,
				`plugins.io.containerd.cri.v1.images.pinned_images.sandbox`:                           SandboxImage,
				`plugins.io.containerd.cri.v1.runtime.cni.conf_dir`:                                   dir + "/cni/net.d",
				`plugins.io.containerd.cri.v1.runtime.containerd.runtimes.runc.options.SystemdCgroup`: false,
				`plugins.io.containerd.cri.v1.runtime.containerd.runtimes.runc.options.Root`:          dir + "/runc",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &Containerd{Flavor: tc.flavor, Dir: dir, Socket: filepath.Join(dir, ctrdSocketName)}
			var doc map[string]any
			if err := toml.Unmarshal([]byte(c.config()), &doc); err != nil {
				t.Fatalf("config is not valid TOML: %v\n%s", err, c.config())
			}
			for path, want := range tc.want {
				if got := lookup(doc, path); got != want {
					t.Errorf("%s = %#v, want %#v", path, got, want)
				}
			}
			if bins, ok := lookup(doc, `plugins.io.containerd.cri.v1.runtime.cni.bin_dirs`).([]any); tc.flavor == Flavor2 && (!ok || len(bins) != 1 || bins[0] != "/usr/lib/cni") {
				t.Errorf("cni.bin_dirs = %v, want [/usr/lib/cni]", bins)
			}
		})
	}
}

// lookup follows a dotted path whose plugin ids contain dots themselves, by
// trying the longest key that exists at each level.
func lookup(doc map[string]any, path string) any {
	var cur any = doc
	for path != "" {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		found := false
		for i := len(path); i > 0; i-- {
			if i < len(path) && path[i] != '.' {
				continue
			}
			if v, ok := m[path[:i]]; ok {
				cur, found = v, true
				path = path[min(i+1, len(path)):]
				break
			}
		}
		if !found {
			return nil
		}
	}
	return cur
}

func TestImageLayer(t *testing.T) {
	t.Parallel()
	layer, err := imageLayer([]byte("busybox-binary"), []byte("pause-binary"), []string{"busybox", "sh", "sleep", "echo"})
	if err != nil {
		t.Fatal(err)
	}
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name] = h
	}
	tests := []struct {
		name     string
		typeflag byte
		mode     int64
		link     string
	}{
		{name: "pause", typeflag: tar.TypeReg, mode: 0o755},
		{name: "bin/busybox", typeflag: tar.TypeReg, mode: 0o755},
		{name: "bin/sh", typeflag: tar.TypeSymlink, link: "busybox", mode: 0o777},
		{name: "bin/sleep", typeflag: tar.TypeSymlink, link: "busybox", mode: 0o777},
		{name: "tmp/", typeflag: tar.TypeDir, mode: 0o1777},
		{name: "etc/passwd", typeflag: tar.TypeReg, mode: 0o644},
	}
	for _, tc := range tests {
		h := entries[tc.name]
		if h == nil {
			t.Errorf("layer lacks %s", tc.name)
			continue
		}
		if h.Typeflag != tc.typeflag || h.Mode != tc.mode || h.Linkname != tc.link {
			t.Errorf("%s: type %c mode %o link %q, want type %c mode %o link %q", tc.name, h.Typeflag, h.Mode, h.Linkname, tc.typeflag, tc.mode, tc.link)
		}
	}
	if _, ok := entries["bin/bin/busybox"]; ok {
		t.Error("layer links busybox to itself")
	}
	again, _ := imageLayer([]byte("busybox-binary"), []byte("pause-binary"), []string{"busybox", "sh", "sleep", "echo"})
	if !bytes.Equal(layer, again) {
		t.Error("two builds of the same layer differ: the image digest would change on every run")
	}
}

func TestUnescapeMount(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`/tmp/a`, `/tmp/a`},
		{`/tmp/with\040space`, `/tmp/with space`},
		{`/tmp/tab\011and\134backslash`, "/tmp/tab\tand\\backslash"},
		{`/tmp/trailing\04`, `/tmp/trailing\04`},
	}
	for _, tc := range tests {
		if got := UnescapeMount(tc.in); got != tc.want {
			t.Errorf("UnescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNewUID(t *testing.T) {
	t.Parallel()
	a, b := NewUID(), NewUID()
	if a == b || len(a) != 36 || a[14] != '4' {
		t.Errorf("NewUID() = %q, %q: want two different version-4 UUIDs", a, b)
	}
}
