package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tandemkit/tandem/internal/ociimage"
)

// TestInstallProxy runs installProxy with stand-ins for tandemctl and
// tandem-proxy (shell scripts: the real ones are what the e2e tier runs)
// and checks what the node then runs: the ExecStart of the unit tandemctl
// wrote when it succeeds; otherwise deploy/'s unit with the node's own
// values, a flag the proxy does not know dropped, and the problem named.
func TestInstallProxy(t *testing.T) {
	const unit = `[Service]
ExecStart=/PREFIX/usr/local/bin/tandem-proxy \
  --listen=/n/proxy/tandem.sock \
  --kubeconfig=/n/kubelet.kubeconfig \
  --kubelet-cgroup-root=/node-a
`
	tests := []struct {
		name        string
		tandemctl   string // script body
		proxyHelp   string // what the proxy's --help prints
		wantArgs    []string
		wantMissing []string
		wantProblem string // substring; empty: none
	}{
		{
			name: "tandemctl installs",
			tandemctl: `p=$4; mkdir -p $p/etc/systemd/system $p/etc/kubernetes/kubelet.conf.d
sed "s#/PREFIX#$p#" "$UNIT" > $p/etc/systemd/system/tandem-proxy.service
echo 'kind: KubeletConfiguration' > $p/etc/kubernetes/kubelet.conf.d/50-tandem-runtime.conf`,
			wantArgs: []string{"{prefix}/usr/local/bin/tandem-proxy", "--listen=/n/proxy/tandem.sock", "--kubeconfig=/n/kubelet.kubeconfig", "--kubelet-cgroup-root=/node-a"},
		},
		{
			name:        "tandemctl cannot install, the proxy knows every flag",
			tandemctl:   `echo "tandemctl: unknown flag: --prefix" >&2; exit 1`,
			proxyHelp:   "--listen --runtime-endpoint --kubeconfig --kubelet-cgroup-root --state-dir --metrics-addr --hooks-dir --cgroup-root --node-name",
			wantArgs:    []string{"{proxy}", "--kubeconfig={node}/kubelet.kubeconfig", "--kubelet-cgroup-root=/node-a", "--node-name=node-a"},
			wantProblem: "unknown flag: --prefix",
		},
		{
			name:        "tandemctl cannot install, an older proxy",
			tandemctl:   `exit 2`,
			proxyHelp:   "--listen --runtime-endpoint --kubeconfig --state-dir --metrics-addr --hooks-dir --cgroup-root --node-name",
			wantArgs:    []string{"{proxy}", "--kubeconfig={node}/kubelet.kubeconfig", "--node-name=node-a"},
			wantMissing: []string{"--kubelet-cgroup-root"},
			wantProblem: "does not know --kubelet-cgroup-root",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			unitFile := filepath.Join(dir, "unit")
			if err := os.WriteFile(unitFile, []byte(unit), 0o644); err != nil {
				t.Fatal(err)
			}
			script := func(name, body string) string {
				p := filepath.Join(dir, name)
				if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				return p
			}
			help := ""
			for _, f := range strings.Fields(tc.proxyHelp) {
				help += "      " + f + " string   a flag\n"
			}
			opts := Options{
				Tandemctl:   script("tandemctl", "UNIT="+unitFile+"\n"+tc.tandemctl),
				ProxyBinary: script("tandem-proxy", "cat <<'EOF'\n"+help+"EOF"),
			}
			nd := filepath.Join(dir, "node-a")
			n := &Node{
				Name: NodeA, Dir: nd, CgroupRoot: "/node-a",
				ProxySocket: filepath.Join(nd, "proxy", "tandem.sock"), ProxyMetrics: "127.0.0.1:1",
				Kubeconfig: filepath.Join(nd, "kubelet.kubeconfig"), ContainerdDir: filepath.Join(nd, "c"),
				KubeletConfigDir: filepath.Join(nd, "prefix", KubeletConfigDir),
			}
			args, problem, err := (&Cluster{}).installProxy(context.Background(), n, opts)
			if err != nil {
				t.Fatal(err)
			}
			r := strings.NewReplacer("{prefix}", filepath.Join(nd, "prefix"), "{proxy}", opts.ProxyBinary, "{node}", nd)
			for i, w := range tc.wantArgs {
				w = r.Replace(w)
				if i == 0 && (len(args) == 0 || args[0] != w) {
					t.Errorf("runs %q, want %s", args, w)
				} else if i > 0 && !slices.Contains(args, w) {
					t.Errorf("runs %q, want %s among them", args, w)
				}
			}
			for _, m := range tc.wantMissing {
				if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, m) }) {
					t.Errorf("runs %q, want no %s", args, m)
				}
			}
			if tc.wantProblem == "" && problem != "" || !strings.Contains(problem, tc.wantProblem) {
				t.Errorf("problem %q, want one containing %q", problem, tc.wantProblem)
			}
			if drops, _ := filepath.Glob(filepath.Join(n.KubeletConfigDir, "*.conf")); len(drops) == 0 {
				t.Errorf("no kubelet drop-in in %s", n.KubeletConfigDir)
			}
		})
	}
}

// TestImageNames reads the names ImportImage waits for from a tarball as
// hack/image writes it, and refuses what is not an OCI image layout.
func TestImageNames(t *testing.T) {
	dir := t.TempDir()
	layer, err := ociimage.Layer([]ociimage.Entry{{Name: "hello", Type: ociimage.File, Mode: 0o755, Data: []byte("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	const name = "ghcr.io/tandemkit/tandem-webhook:v0.1.0"
	if err := ociimage.Write(&buf, ociimage.Image{Name: name, Layers: [][]byte{layer}}); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.tar")
	if err := os.WriteFile(good, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	names, err := imageNames(good)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{name}) {
		t.Errorf("names %q, want %q", names, name)
	}
	bad := filepath.Join(dir, "bad.tar")
	if err := os.WriteFile(bad, layer, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := imageNames(bad); err == nil || !strings.Contains(err.Error(), "no index.json") {
		t.Errorf("a plain tar: err %v, want no index.json", err)
	}
}
