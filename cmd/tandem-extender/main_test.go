package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	extender "github.com/tandemkit/tandem/scheduler-extender"
)

// TestLoad checks the precedence an operator relies on: defaults < file < env < flags, and that a
// misspelt key in the file is an error rather than a silently kept default.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "usageThresholds:\n  cpu: 70\nexpiredMetricPolicy:\n  otherPods: Reject\nlisten: \":9000\"\nwriteTimeout: 3s\n"+
		"maxRequestsInflight: 8\ntlsCertFile: tls.crt\ntlsKeyFile: tls.key\n")
	typo := write("typo.yaml", "usageThreshold:\n  cpu: 70\n")

	opts, err := load(nil, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Listen != defaultListen || opts.UsageThresholds.CPU != 65 || opts.UsageThresholds.Memory != 95 ||
		opts.ExpiredMetricPolicy.BatchPods != "Reject" || opts.DefaultEstimatedUsage.MemoryBytes != 200<<20 || opts.WriteTimeout != 10*time.Second ||
		opts.MaxRequestsInflight != extender.DefaultMaxRequestsInflight || opts.MaxRequestBodyBytes != extender.DefaultMaxRequestBodyBytes ||
		opts.MetricsListen != "" || opts.TLSClientCAFile != "" {
		t.Fatalf("defaults = %+v", opts)
	}

	t.Setenv("TANDEM_EXTENDER_USAGETHRESHOLDS_MEMORY", "90")
	t.Setenv("TANDEM_EXTENDER_LISTEN", ":9100")
	t.Setenv("TANDEM_EXTENDER_MAXREQUESTBODYBYTES", "1048576")
	opts, err = load([]string{"--config", good, "--listen", ":9200", "-v", "4", "--max-requests-inflight", "16",
		"--tls-client-ca-file", "ca.crt", "--metrics-listen", "127.0.0.1:10263"}, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if opts.UsageThresholds.CPU != 70 || opts.UsageThresholds.Memory != 90 || opts.ExpiredMetricPolicy.OtherPods != "Reject" ||
		opts.ExpiredMetricPolicy.BatchPods != "Reject" || opts.Listen != ":9200" || opts.WriteTimeout != 3*time.Second ||
		opts.MaxRequestsInflight != 16 || opts.MaxRequestBodyBytes != 1<<20 || opts.TLSCertFile != "tls.crt" ||
		opts.TLSClientCAFile != "ca.crt" || opts.MetricsListen != "127.0.0.1:10263" {
		t.Fatalf("merged = %+v", opts)
	}

	if _, err := load([]string{"--config", typo}, os.Getenv); err == nil || !strings.Contains(err.Error(), "usagethreshold") {
		t.Fatalf("typo error = %v, want it to name the key (lower-cased, as keys match in any case)", err)
	}
	if _, err := load([]string{"--tls-cert-file", "a.pem"}, os.Getenv); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
	if _, err := load([]string{"--tls-client-ca-file", "ca.pem"}, os.Getenv); err == nil {
		t.Fatal("client certificates without HTTPS were accepted")
	}
	if _, err := load([]string{"--max-requests-inflight", "0"}, os.Getenv); err == nil || !strings.Contains(err.Error(), "maxRequestsInflight") {
		t.Fatalf("no in-flight limit: error = %v", err)
	}
	t.Setenv("TANDEM_EXTENDER_USAGETHRESHOLDS_CPU", "150")
	if _, err := load(nil, os.Getenv); err == nil || !strings.Contains(err.Error(), "usageThresholds.cpu") {
		t.Fatalf("invalid threshold error = %v", err)
	}
}

// TestLoadShippedConfig: the file deploy/extender's ConfigMap mounts loads, as YAML and as the same
// keys in JSON, and gives the defaults it says it writes out; a bad value is refused by file and line.
func TestLoadShippedConfig(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/extender/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(raw, &cm); err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON([]byte(cm.Data["extender.yaml"]))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{"extender.yaml": cm.Data["extender.yaml"], "extender.json": string(js),
		"bad.yaml": "usageThresholds:\n  cpu: 65\n  memory: lots\n"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		file, wantErr string
	}{
		{file: "extender.yaml"},
		{file: "extender.json"},
		{file: "bad.yaml", wantErr: "bad.yaml:3: key usageThresholds.memory"},
	}
	for _, tt := range tests {
		opts, err := load([]string{"--config", filepath.Join(dir, tt.file)}, func(string) string { return "" })
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: err = %v, want one containing %q", tt.file, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tt.file, err)
		}
		if opts.Config != extender.DefaultConfig() {
			t.Errorf("%s: policy %+v, want the defaults %+v", tt.file, opts.Config, extender.DefaultConfig())
		}
	}
}
