package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

	opts, err := load(nil)
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
		"--tls-client-ca-file", "ca.crt", "--metrics-listen", "127.0.0.1:10263"})
	if err != nil {
		t.Fatal(err)
	}
	if opts.UsageThresholds.CPU != 70 || opts.UsageThresholds.Memory != 90 || opts.ExpiredMetricPolicy.OtherPods != "Reject" ||
		opts.ExpiredMetricPolicy.BatchPods != "Reject" || opts.Listen != ":9200" || opts.WriteTimeout != 3*time.Second ||
		opts.MaxRequestsInflight != 16 || opts.MaxRequestBodyBytes != 1<<20 || opts.TLSCertFile != "tls.crt" ||
		opts.TLSClientCAFile != "ca.crt" || opts.MetricsListen != "127.0.0.1:10263" {
		t.Fatalf("merged = %+v", opts)
	}

	if _, err := load([]string{"--config", typo}); err == nil || !strings.Contains(err.Error(), "usagethreshold") {
		t.Fatalf("typo error = %v, want it to name the key (viper lower-cases keys)", err)
	}
	if _, err := load([]string{"--tls-cert-file", "a.pem"}); err == nil {
		t.Fatal("a certificate without a key was accepted")
	}
	if _, err := load([]string{"--tls-client-ca-file", "ca.pem"}); err == nil {
		t.Fatal("client certificates without HTTPS were accepted")
	}
	if _, err := load([]string{"--max-requests-inflight", "0"}); err == nil || !strings.Contains(err.Error(), "maxRequestsInflight") {
		t.Fatalf("no in-flight limit: error = %v", err)
	}
	t.Setenv("TANDEM_EXTENDER_USAGETHRESHOLDS_CPU", "150")
	if _, err := load(nil); err == nil || !strings.Contains(err.Error(), "usageThresholds.cpu") {
		t.Fatalf("invalid threshold error = %v", err)
	}
}
