package framework

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// TestConfig renders each flavor's containerd config and checks, on the
// parsed TOML, the settings that the machines and isolation depend on.
func TestConfig(t *testing.T) {
	t.Parallel()
	dir := "/tmp/tdm-e2e-x/ctrd"
	tests := []struct {
		name      string
		flavor    string
		nriSocket string
		want      map[string]any // dotted path → value
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
		{
			// The keys are those of containerd v2.4.2's internal/nri.Config.
			name:      "2 with NRI",
			flavor:    Flavor2,
			nriSocket: NRISocketPath(dir),
			want: map[string]any{
				`plugins.io.containerd.server.v1.grpc.address`:                 dir + "/containerd.sock",
				`plugins.io.containerd.nri.v1.nri.disable`:                     false,
				`plugins.io.containerd.nri.v1.nri.socket_path`:                 dir + "/nri.sock",
				`plugins.io.containerd.nri.v1.nri.plugin_path`:                 dir + "/nri/plugins",
				`plugins.io.containerd.nri.v1.nri.plugin_config_path`:          dir + "/nri/conf.d",
				`plugins.io.containerd.nri.v1.nri.plugin_registration_timeout`: "5s",
				`plugins.io.containerd.nri.v1.nri.plugin_request_timeout`:      "2s",
				`plugins.io.containerd.nri.v1.nri.disable_connections`:         false,
				`plugins.io.containerd.cri.v1.runtime.restrict_oom_score_adj`:  true,
				`plugins.io.containerd.cri.v1.images.pinned_images.sandbox`:    SandboxImage,
				`plugins.io.containerd.cri.v1.runtime.cni.conf_dir`:            dir + "/cni/net.d",
				`plugins.io.containerd.shim.v1.manager.socket_dir`:             dir + "/s",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &Containerd{Flavor: tc.flavor, Dir: dir, Socket: filepath.Join(dir, ctrdSocketName), NRISocket: tc.nriSocket}
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

// TestConfigNRITimeouts checks that the NRI timeouts parse as containerd parses them (its
// tomlext.Duration is time.ParseDuration), so that a typo cannot leave containerd's defaults in force.
func TestConfigNRITimeouts(t *testing.T) {
	t.Parallel()
	dir := "/tmp/tdm-e2e-x/ctrd"
	c := &Containerd{Flavor: Flavor2, Dir: dir, Socket: filepath.Join(dir, ctrdSocketName), NRISocket: NRISocketPath(dir)}
	var doc map[string]any
	if err := toml.Unmarshal([]byte(c.config()), &doc); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]time.Duration{"plugin_registration_timeout": 5 * time.Second, "plugin_request_timeout": NRIRequestTimeout} {
		s, _ := lookup(doc, "plugins.io.containerd.nri.v1.nri."+key).(string)
		if got, err := time.ParseDuration(s); err != nil || got != want {
			t.Errorf("%s = %q (%v, %v), want %v", key, s, got, err, want)
		}
	}
}

func TestCheckNRISocket(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, flavor, sock string
		wantErr            string // "" for none
	}{
		{name: "off on 1.6", flavor: Flavor16},
		{name: "off on 2", flavor: Flavor2},
		{name: "2", flavor: Flavor2, sock: "/tmp/tdm-e2e-x/ctrd/nri.sock"},
		{name: "1.6 has NRI 0.1 only", flavor: Flavor16, sock: "/tmp/tdm-e2e-x/ctrd/nri.sock", wantErr: "NRI 0.1 only"},
		{name: "relative", flavor: Flavor2, sock: "nri.sock", wantErr: "absolute path"},
		{name: "too long for a unix socket", flavor: Flavor2, sock: "/" + strings.Repeat("d", 110) + "/nri.sock", wantErr: "108 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := checkNRISocket(tc.flavor, tc.sock)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("checkNRISocket(%q, %q) = %v, want an error mentioning %q", tc.flavor, tc.sock, err, tc.wantErr)
			}
		})
	}
}

// TestProxyArgs: tandem-nri connects to containerd's NRI socket instead of listening, and its Endpoint
// is containerd's, so that a test uses Proxy.Endpoint in both modes alike.
func TestProxyArgs(t *testing.T) {
	t.Parallel()
	opts := ProxyOptions{RuntimeEndpoint: "unix:///d/ctrd/containerd.sock", Dir: "/d/proxy", ExtraArgs: []string{"--reserved-cpus", "0"}}
	tests := []struct {
		name         string
		nriSocket    string
		wantSocket   string
		wantEndpoint string
		want         map[string]string // flag → value; "" for a flag that must be absent
	}{
		{
			name: "proxy", wantSocket: "/d/proxy/tandem.sock", wantEndpoint: "unix:///d/proxy/tandem.sock",
			want: map[string]string{"--listen": "/d/proxy/tandem.sock", "--runtime-endpoint": "unix:///d/ctrd/containerd.sock",
				"--reserved-cpus": "0", "--nri-socket": ""},
		},
		{
			name: "nri", nriSocket: "/d/ctrd/nri.sock", wantEndpoint: "unix:///d/ctrd/containerd.sock",
			want: map[string]string{"--nri-socket": "/d/ctrd/nri.sock", "--runtime-endpoint": "unix:///d/ctrd/containerd.sock",
				"--reserved-cpus": "0", "--listen": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := opts
			o.NRISocket = tc.nriSocket
			p := newProxy(o, "127.0.0.1:1")
			if p.Socket != tc.wantSocket || p.Endpoint != tc.wantEndpoint {
				t.Errorf("Socket, Endpoint = %q, %q, want %q, %q", p.Socket, p.Endpoint, tc.wantSocket, tc.wantEndpoint)
			}
			got := flagValues(p.Args())
			for flag, want := range tc.want {
				if got[flag] != want {
					t.Errorf("%s = %q, want %q (args %q)", flag, got[flag], want, p.Args())
				}
			}
		})
	}
}

// flagValues maps each --flag of args to its value, given as --flag=value or --flag value.
func flagValues(args []string) map[string]string {
	m := map[string]string{}
	for i := 0; i < len(args); i++ {
		if !strings.HasPrefix(args[i], "--") {
			continue
		}
		if k, v, ok := strings.Cut(args[i], "="); ok {
			m[k] = v
		} else if i+1 < len(args) {
			m[k] = args[i+1]
			i++
		}
	}
	return m
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
