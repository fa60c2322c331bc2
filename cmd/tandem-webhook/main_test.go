package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestLoad: every flag keeps its name and default; the config file and TANDEM_WEBHOOK_<FLAG> set each,
// flags over the environment over the file; $POD_NAMESPACE is namespace's default.
// Not parallel: -v sets klog's verbosity, which is the process's.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"all.yaml": `listen: ":8443"
metricsListen: ":8080"
kubeconfig: /k.conf
namespace: ns
serviceName: svc
secretName: sec
webhookConfiguration: whc
tlsCertFile: /tls.crt
tlsKeyFile: /tls.key
excludedNamespaces: [a, b]
auditInterval: 1m
lookupTimeout: 3s
shutdownTimeout: 4s
`,
		"typo.yaml": "listen: \":1\"\nservice: svc\n",
		"bad.yaml":  "auditInterval: often\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all := filepath.Join(dir, "all.yaml")
	defaults := options{listen: ":9443", metricsListen: ":9080", namespace: "koordinator-system", service: "tandem-webhook",
		secret: "tandem-webhook-tls", configuration: "tandem-webhook", excluded: []string{"kube-system", "koordinator-system"},
		auditInterval: 30 * time.Second, lookupTimeout: 2 * time.Second, shutdownTimeout: 10 * time.Second}
	fromFile := options{listen: ":8443", metricsListen: ":8080", kubeconfig: "/k.conf", namespace: "ns", service: "svc", secret: "sec",
		configuration: "whc", tlsCertFile: "/tls.crt", tlsKeyFile: "/tls.key", excluded: []string{"a", "b"},
		auditInterval: time.Minute, lookupTimeout: 3 * time.Second, shutdownTimeout: 4 * time.Second}
	with := func(o options, change func(*options)) *options {
		change(&o)
		return &o
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    *options
		wantErr string
	}{
		{name: "defaults", want: &defaults},
		{name: "namespace from POD_NAMESPACE", env: map[string]string{"POD_NAMESPACE": "tandem"}, want: with(defaults, func(o *options) { o.namespace = "tandem" })},
		{name: "flags", args: []string{"--listen=:1", "--excluded-namespaces=x", "--audit-interval=5s", "-v=2"},
			want: with(defaults, func(o *options) { o.listen, o.excluded, o.auditInterval = ":1", []string{"x"}, 5*time.Second })},
		{name: "every key of the file", args: []string{"--config", all}, want: &fromFile},
		{name: "env beats file", args: []string{"--config", all}, env: map[string]string{"TANDEM_WEBHOOK_METRICS_LISTEN": ":7080", "TANDEM_WEBHOOK_EXCLUDED_NAMESPACES": "c"},
			want: with(fromFile, func(o *options) { o.metricsListen, o.excluded = ":7080", []string{"c"} })},
		{name: "flag beats env", args: []string{"--config", all, "--namespace", "flag"}, env: map[string]string{"TANDEM_WEBHOOK_NAMESPACE": "env"},
			want: with(fromFile, func(o *options) { o.namespace = "flag" })},
		{name: "misspelt key", args: []string{"--config", filepath.Join(dir, "typo.yaml")}, wantErr: "unknown keys service (line 2)"},
		{name: "bad value names file, line and flag", args: []string{"--config", filepath.Join(dir, "bad.yaml")}, wantErr: "bad.yaml:1: key auditInterval"},
		{name: "certificate without key", args: []string{"--tls-cert-file", "a.pem"}, wantErr: "--tls-private-key-file"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "--nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := load(tt.args, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("load = %+v, want %+v", *got, *tt.want)
			}
		})
	}
}
