package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/e2e/framework"
)

// servers is what the benchmark runs: etcd, kube-apiserver, tandem-webhook and the floor webhook,
// in its temp dir.
type servers struct {
	dir                          string
	cp                           *controlplane.ControlPlane
	pki                          *controlplane.PKI
	etcd, apiserver, hook, floor *framework.Daemon
	apiURL                       string
	webhookPort, floorPort       int
	metricsURL                   string // tandem-webhook's plain-HTTP /metrics
	floorMetricsURL              string // the floor's
}

// stop stops what was started, the webhooks first, etcd last.
func (s *servers) stop(ctx context.Context) {
	controlplane.StopAll(ctx, s.floor, s.hook)
	s.cp.Stop(ctx)
}

// startControlPlane starts etcd and kube-apiserver and waits until the API server is ready.
func (s *servers) startControlPlane(ctx context.Context, etcdBin, apiserverBin string) error {
	ports, err := controlplane.FreePorts(4)
	if err != nil {
		return err
	}
	s.webhookPort, s.floorPort = ports[0], ports[2]
	s.metricsURL = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	s.floorMetricsURL = fmt.Sprintf("http://127.0.0.1:%d", ports[3])
	cp, err := controlplane.Start(ctx, s.dir, etcdBin, apiserverBin)
	s.cp = cp
	if err != nil {
		return err
	}
	s.pki, s.etcd, s.apiserver, s.apiURL = cp.PKI, cp.Etcd, cp.APIServer, cp.URL
	return nil
}

// startWebhook starts the built tandem-webhook with the run's serving certificate from files and
// waits for its /readyz (caches synced, which needs the CRD applied first).
func (s *servers) startWebhook(ctx context.Context, bin string) error {
	metricsAddr := strings.TrimPrefix(s.metricsURL, "http://")
	var err error
	s.hook, err = framework.StartDaemon("tandem-webhook", bin, []string{
		fmt.Sprintf("--listen=127.0.0.1:%d", s.webhookPort),
		"--metrics-listen=" + metricsAddr,
		"--kubeconfig=" + s.pki.Kubeconfig,
		"--tls-cert-file=" + s.pki.Cert, "--tls-private-key-file=" + s.pki.Key,
		"--webhook-configuration=" + webhookConfigName,
	}, nil, filepath.Join(s.dir, "tandem-webhook.log"))
	if err != nil {
		return err
	}
	return controlplane.WaitHTTP(ctx, s.hook, &http.Client{Timeout: 5 * time.Second}, s.metricsURL+"/readyz", "", "", 2*time.Minute)
}
