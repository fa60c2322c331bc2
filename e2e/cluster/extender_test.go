package cluster

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	schedulerconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	extender "github.com/tandemkit/tandem/scheduler-extender"
)

// TestSchedulerConfig loads the configuration the cluster gives
// kube-scheduler the way kube-scheduler v1.36 loads its --config (decode with
// defaults, then validate), so a configuration it would refuse to start with
// fails here without a cluster; deploy/'s must also have the profiles
// Deployments written for Koordinator (koord-scheduler) and every other pod
// name, both calling the extender where
// its DaemonSet listens.
func TestSchedulerConfig(t *testing.T) {
	const base = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
extenders:
- urlPrefix: http://tandem-extender.kube-system.svc:10262
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 3
  nodeCacheCapable: true
  httpTimeout: 1s
`
	deploy, err := deployFile(SchedulerConfig)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		src     string // a file; empty: yaml
		yaml    string
		wantErr string // substring of kube-scheduler's error; empty: valid
		shipped bool   // deploy/'s: profiles and URL checked too
	}{
		{name: "deploy/", src: deploy, shipped: true},
		{name: "without managedResources", yaml: base},
		{
			name: "managedResources of the kubernetes.io domain",
			yaml: base + `  managedResources:
  - name: kubernetes.io/batch-cpu
`,
			wantErr: "invalid extended resource name",
		},
		{
			name: "managedResources of another domain",
			yaml: base + `  managedResources:
  - name: example.com/batch-cpu
`,
		},
		{name: "not a scheduler configuration", yaml: "apiVersion: v1\nkind: ConfigMap\n", wantErr: "KubeSchedulerConfiguration"},
	}
	tlsDir := filepath.Join(t.TempDir(), "extender")
	if err := newExtenderTLS(tlsDir).write(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := tc.src
			if src == "" {
				src = filepath.Join(dir, "in.yaml")
				if err := os.WriteFile(src, []byte(tc.yaml), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out := filepath.Join(dir, "out.yaml")
			err := writeSchedulerConfig(out, "/k/scheduler.kubeconfig", tlsDir, src)
			if err == nil {
				err = loadSchedulerConfig(t, out, tlsDir, tc.shipped)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("kube-scheduler would refuse the configuration from %s: %v", src, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// loadSchedulerConfig decodes and validates a --config file as kube-scheduler
// does, and checks the values the cluster substitutes; for deploy/'s file
// (shipped), also the profiles and the extender's URL it must keep.
func loadSchedulerConfig(t *testing.T, path, tlsDir string, shipped bool) error {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDecoder().Decode(b, nil, nil)
	if err != nil {
		return err
	}
	cfg, ok := obj.(*schedulerconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	if err := validation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		return err
	}
	if cfg.ClientConnection.Kubeconfig != "/k/scheduler.kubeconfig" || cfg.LeaderElection.LeaderElect {
		t.Errorf("kubeconfig %q, leader election %v: want the cluster's kubeconfig and no election", cfg.ClientConnection.Kubeconfig, cfg.LeaderElection.LeaderElect)
	}
	if !shipped {
		return nil
	}
	var names []string
	for _, p := range cfg.Profiles {
		names = append(names, p.SchedulerName)
	}
	if strings.Join(names, ",") != "default-scheduler,koord-scheduler" {
		t.Errorf("profiles %v, want default-scheduler and koord-scheduler (Deployments written for Koordinator name koord-scheduler)", names)
	}
	if len(cfg.Extenders) != 1 || cfg.Extenders[0].URLPrefix != ExtenderURL {
		t.Fatalf("extenders %+v, want one at %s, where deploy/'s DaemonSet listens", cfg.Extenders, ExtenderURL)
	}
	if tc := cfg.Extenders[0].TLSConfig; tc == nil || filepath.Dir(tc.CertFile) != tlsDir || filepath.Dir(tc.KeyFile) != tlsDir || filepath.Dir(tc.CAFile) != tlsDir {
		t.Errorf("extender tlsConfig %+v, want the cluster's files in %s", tc, tlsDir)
	}
	return nil
}

// TestExtenderTLS: the extender serving the cluster's certificate and client
// CA (the Secret the tier creates) answers a client built from the scheduler
// configuration the cluster writes, as kube-scheduler builds it, and no client
// without kube-scheduler's certificate.
func TestExtenderTLS(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	dir := t.TempDir()
	x := newExtenderTLS(filepath.Join(dir, "pki", "extender"))
	if err := x.write(); err != nil {
		t.Fatal(err)
	}
	schedConfig := filepath.Join(dir, "kube-scheduler-config.yaml")
	if err := writeSchedulerConfig(schedConfig, "/k/scheduler.kubeconfig", x.Dir, ""); err != nil {
		t.Fatal(err)
	}
	cfg, err := extender.NewTLSConfig(ctx, extender.TLSFiles{CertFile: x.Cert, KeyFile: x.Key, ClientCAFile: x.CA})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "https://" + lis.Addr().String() + "/readyz"

	client, err := extenderClient(schedConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := httpOK(ctx, client, url); err != nil {
		t.Errorf("kube-scheduler's client: %v", err)
	}
	anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: client.Transport.(*http.Transport).TLSClientConfig.Clone()}}
	anonymous.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = nil
	anonymous.Transport.(*http.Transport).TLSClientConfig.Certificates = nil
	if err := httpOK(ctx, anonymous, url); err == nil {
		t.Error("a client without kube-scheduler's certificate was served")
	}
}
