package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/e2e/framework"
)

func TestExecStart(t *testing.T) {
	tests := []struct {
		name    string
		unit    string
		want    []string
		wantErr string
	}{
		{
			name: "one line",
			unit: "[Service]\nExecStart=/bin/p --a=1 -v=2\nRestart=always\n",
			want: []string{"/bin/p", "--a=1", "-v=2"},
		},
		{
			name: "continuations",
			unit: "[Service]\nExecStart=/bin/p \\\n  --a=1 \\\n  --b=2\nRestart=always\n",
			want: []string{"/bin/p", "--a=1", "--b=2"},
		},
		{name: "missing", unit: "[Service]\nRestart=always\n", wantErr: "no ExecStart"},
		{name: "quotes", unit: "[Service]\nExecStart=/bin/p --a=\"x y\"\n", wantErr: "quotes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ExecStart([]byte(tc.unit))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ExecStart error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("ExecStart = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestProxyArgsFromUnit: the cluster runs tandem-proxy with deploy/'s unit's
// flags, its host paths swapped for private ones and nothing else changed.
func TestProxyArgsFromUnit(t *testing.T) {
	s := proxyUnitSubstitutions{Listen: "/x/p.sock", RuntimeEndpoint: "unix:///x/c.sock", StateDir: "/x/state", MetricsAddr: "127.0.0.1:1", HooksDir: "/x/hooks"}
	got, err := proxyArgsFromUnit(s)
	if err != nil {
		t.Fatal(err)
	}
	path, err := deployFile(ProxyUnit)
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	words, err := ExecStart(unit)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(words)-1 {
		t.Fatalf("args %q, unit's ExecStart %q: every flag must be kept", got, words)
	}
	for _, want := range []string{"--listen=/x/p.sock", "--runtime-endpoint=unix:///x/c.sock", "--state-dir=/x/state", "--metrics-addr=127.0.0.1:1", "--hooks-dir=/x/hooks"} {
		if !slices.Contains(got, want) {
			t.Errorf("args %q lack %s", got, want)
		}
	}
	for _, w := range words[1:] {
		name, _, _ := strings.Cut(w, "=")
		switch name {
		case "--listen", "--runtime-endpoint", "--state-dir", "--metrics-addr", "--hooks-dir":
		default:
			if !slices.Contains(got, w) {
				t.Errorf("unit flag %s was not passed on unchanged: %q", w, got)
			}
		}
	}
}

// TestKubeletFilesDecodeStrictly decodes deploy/'s KubeletConfiguration
// drop-in and the config the cluster writes with kubelet's own v1beta1 types;
// an unknown or misspelt field fails.
func TestKubeletFilesDecodeStrictly(t *testing.T) {
	src, err := deployFile(KubeletDropIn)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var dropIn kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(b, &dropIn); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	if dropIn.Kind != "KubeletConfiguration" || dropIn.APIVersion != kubeletv1beta1.SchemeGroupVersion.String() {
		t.Errorf("%s is %s %s", src, dropIn.APIVersion, dropIn.Kind)
	}
	if dropIn.ContainerRuntimeEndpoint != NodeRuntimeEndpoint || dropIn.ImageServiceEndpoint != NodeRuntimeEndpoint {
		t.Errorf("%s points kubelet at %q / %q, want %s", src, dropIn.ContainerRuntimeEndpoint, dropIn.ImageServiceEndpoint, NodeRuntimeEndpoint)
	}

	dir := t.TempDir()
	if err := writeKubeletDropIn(filepath.Join(dir, "conf.d"), "unix:///private/tandem.sock"); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(filepath.Join(dir, "conf.d", filepath.Base(KubeletDropIn)))
	if err != nil {
		t.Fatal(err)
	}
	var copied kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(b, &copied); err != nil {
		t.Fatal(err)
	}
	if copied.ContainerRuntimeEndpoint != "unix:///private/tandem.sock" || copied.ImageServiceEndpoint != "unix:///private/tandem.sock" {
		t.Errorf("copied drop-in points at %q / %q, want the private socket", copied.ContainerRuntimeEndpoint, copied.ImageServiceEndpoint)
	}

	cfgPath := filepath.Join(dir, "kubelet.yaml")
	if err := writeKubeletConfig(cfgPath, kubeletConfigParams{Dir: dir, Port: 12345, CACert: "/ca.crt", CgroupRoot: "/tandem-x"}); err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("kubelet config: %v", err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"runtime endpoint left to the drop-in", cfg.ContainerRuntimeEndpoint == ""},
		{"cgroupfs driver", cfg.CgroupDriver == "cgroupfs"},
		{"cgroup v1 accepted", cfg.FailCgroupV1 != nil && !*cfg.FailCgroupV1},
		{"swap accepted", cfg.FailSwapOn != nil && !*cfg.FailSwapOn},
		{"no resolv.conf", cfg.ResolverConfig != nil && *cfg.ResolverConfig == ""},
		{"private cgroup root", cfg.CgroupRoot == "/tandem-x"},
		{"anonymous requests refused", cfg.Authentication.Anonymous.Enabled != nil && !*cfg.Authentication.Anonymous.Enabled},
		{"small evictionHard", cfg.EvictionHard["memory.available"] != "" && cfg.EvictionHard["nodefs.available"] == "1%"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("kubelet config: not %s:\n%s", c.name, b)
		}
	}
}

// TestPKI: the API server's certificate verifies for 127.0.0.1 and for the
// machine's address (where pods on the pod network reach it) against the CA
// in the kubeconfigs, and the client certificate it shows kubelet is a
// system:masters client signed by the CA kubelet trusts.
func TestPKI(t *testing.T) {
	p := newPKI(filepath.Join(t.TempDir(), "pki"))
	if err := p.write(net.ParseIP("192.0.2.10")); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("CA does not parse")
	}
	tests := []struct {
		name, cert, key string
		opts            x509.VerifyOptions
		wantOrg         string
	}{
		{"serving", p.ServingCert, p.ServingKey, x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ""},
		{"serving at the host address", p.ServingCert, p.ServingKey, x509.VerifyOptions{Roots: pool, DNSName: "192.0.2.10", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ""},
		{"kubelet client", p.KubeletClientCert, p.KCKey, x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, "system:masters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := tls.LoadX509KeyPair(tc.cert, tc.key)
			if err != nil {
				t.Fatalf("key pair: %v", err)
			}
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := leaf.Verify(tc.opts); err != nil {
				t.Errorf("verify: %v", err)
			}
			if tc.wantOrg != "" && !slices.Contains(leaf.Subject.Organization, tc.wantOrg) {
				t.Errorf("organization %v, want %s", leaf.Subject.Organization, tc.wantOrg)
			}
		})
	}
	for _, f := range []string{p.CAKey, p.ServingKey, p.KCKey, p.ServiceAccountKey} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: private keys must be readable by root only", f, st.Mode().Perm())
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ in, want string }{
		{`/a/b`, "/a/b"},
		{`/a\040b`, "/a b"},
		{`/a\011b\134`, "/a\tb\\"},
	}
	for _, tc := range tests {
		if got := framework.UnescapeMount(tc.in); got != tc.want {
			t.Errorf("framework.UnescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestTokenFile checks the lines kube-apiserver's --token-auth-file gets:
// each node's identity must be exactly what the Node authorizer and
// NodeRestriction recognise (user system:node:<name>, group system:nodes),
// or the nodes' kubelets and proxies would lose their rights or share them.
func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.csv")
	users := append(controlPlaneUsers(), nodeUser(NodeA), nodeUser(NodeB))
	tokens, err := writeTokens(path, users)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	byUser := map[string]string{}
	for _, l := range lines {
		f := strings.SplitN(l, ",", 4)
		if len(f) < 3 {
			t.Fatalf("token line %q: want token,user,uid[,groups]", l)
		}
		byUser[f[1]] = l
	}
	tests := []struct {
		key, user, groups string
	}{
		{"admin", "admin", `"system:masters"`},
		{KubeControllerManager, "system:kube-controller-manager", ""},
		{KubeScheduler, "system:kube-scheduler", ""},
		{NodeDaemon(Kubelet, NodeA), "system:node:node-a", `"system:nodes"`},
		{NodeDaemon(Kubelet, NodeB), "system:node:node-b", `"system:nodes"`},
	}
	if len(lines) != len(tests) {
		t.Errorf("%d token lines, want %d:\n%s", len(lines), len(tests), b)
	}
	seen := map[string]bool{}
	for _, tc := range tests {
		tok := tokens[tc.key]
		if tok == "" || seen[tok] {
			t.Errorf("%s: token %q, want a distinct one", tc.key, tok)
		}
		seen[tok] = true
		want := tok + "," + tc.user + "," + tc.user
		if tc.groups != "" {
			want += "," + tc.groups
		}
		if got := byUser[tc.user]; got != want {
			t.Errorf("line for %s = %q, want %q", tc.user, got, want)
		}
	}
}
