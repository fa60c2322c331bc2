package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/bench/internal/controlplane"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/e2e/framework"
)

// kwokVersion is the kwok release the benchmark builds once and caches (sigs.k8s.io/kwok, from the
// Go module proxy): its controller plays every simulated node's kubelet.
const kwokVersion = "v0.8.0"

// kwokNodeAnnotation marks the Nodes kwok manages (--manage-nodes-with-annotation-selector).
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// cluster is one run's servers: etcd, kube-apiserver, kwok, kube-scheduler, and with Tandem
// tandem-extender and tandem-webhook, each a process of its own.
type cluster struct {
	dir      string
	tandem   bool
	cp       *controlplane.ControlPlane
	kwok     *framework.Daemon
	sched    *framework.Daemon
	extender *framework.Daemon
	webhook  *framework.Daemon
	// The plain-HTTP /metrics of tandem-extender and tandem-webhook; kube-scheduler's https one.
	extenderMetrics, webhookMetrics, schedURL string
	webhookPort, extenderPort                 int
	cs                                        kubernetes.Interface
}

// stop stops what was started, the cluster's users first, etcd last.
func (c *cluster) stop(ctx context.Context) {
	controlplane.StopAll(ctx, c.sched, c.webhook, c.extender, c.kwok)
	c.cp.Stop(ctx)
}

// daemons is every process the run started, for the check that none is left.
func (c *cluster) daemons() []*framework.Daemon {
	ds := []*framework.Daemon{c.sched, c.webhook, c.extender, c.kwok}
	if c.cp != nil {
		ds = append(ds, c.cp.APIServer, c.cp.Etcd)
	}
	var out []*framework.Daemon
	for _, d := range ds {
		if d != nil {
			out = append(out, d)
		}
	}
	return out
}

// ensureKwok returns the cached kwok binary, building it the first time with `go install` outside
// any module (so Tandem's go.mod never carries kwok's dependencies).
func ensureKwok(ctx context.Context) (string, error) {
	dir := filepath.Join(framework.CacheDir(), "kwok-"+kwokVersion)
	bin := filepath.Join(dir, "kwok")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	progress("building kwok %s once into %s (about two minutes)", kwokVersion, dir)
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "kwok-build-")
	if err != nil {
		return "", fmt.Errorf("create kwok build dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.CommandContext(ctx, framework.GoBinary(), "install", "sigs.k8s.io/kwok/cmd/kwok@"+kwokVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install sigs.k8s.io/kwok/cmd/kwok@%s (needs the Go module proxy): %w: %s", kwokVersion, err, lastBytes(out, 3000))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, "kwok"), bin); err != nil {
		return "", fmt.Errorf("install kwok: %w", err)
	}
	return bin, nil
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// kwokStages are the lifecycle kwok plays for the simulated nodes and pods: a node becomes Ready
// once, a bound pod becomes Running in one status write (a kubelet writes about as much), a
// deleted pod is removed. There is deliberately no heartbeat stage: kubelets renew a Lease every
// 10 s, which at 5000 nodes is 500 writes/s that no node-lifecycle controller reads here (none
// runs) and that two cores cannot carry beside the scheduler; both settings of a run lack it alike.
const kwokStages = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scale-node-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: 'NotIn'
      values: ['Running']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - type: Ready
        status: "True"
        reason: KubeletReady
        message: simulated by kwok for Tandem's scale benchmark
        lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
      addresses:
      - type: Hostname
        address: {{ NodeName | Quote }}
      allocatable:
      {{ YAML .status.allocatable 1 }}
      capacity:
      {{ YAML .status.capacity 1 }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: kwok
        containerRuntimeVersion: kwok
        kernelVersion: kwok
        kubeProxyVersion: kwok
        osImage: kwok
        machineID: ""
        systemUUID: ""
        bootID: ""
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scale-pod-running
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Pending']
  next:
    statusTemplate: |
      {{ $now := Now }}
      phase: Running
      startTime: {{ $now | Quote }}
      conditions:
      - type: PodScheduled
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
      - type: Ready
        status: "True"
        lastTransitionTime: {{ $now | Quote }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: scale-pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    delete: true
`

// startKwok starts kwok's controller for the Nodes annotated kwokNodeAnnotation.
func (c *cluster) startKwok(ctx context.Context, bin string) error {
	stages := filepath.Join(c.dir, "kwok-stages.yaml")
	if err := os.WriteFile(stages, []byte(kwokStages), 0o600); err != nil {
		return err
	}
	var err error
	c.kwok, err = framework.StartDaemon("kwok", bin, []string{
		"--kubeconfig=" + c.cp.PKI.Kubeconfig,
		"--config=" + stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + kwokNodeAnnotation + "=fake",
		"--cidr=10.0.0.0/8",
	}, nil, filepath.Join(c.dir, "kwok.log"))
	if err != nil {
		return err
	}
	// kwok has no readiness endpoint of its own: give it a moment and make sure it is still up.
	if err := runctx.Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	return c.kwok.Exited()
}

// schedulerConfig writes deploy/'s KubeSchedulerConfiguration, decoded strictly with
// kube-scheduler's own types, with what names this machine's files replaced: the kubeconfig, the
// extender's TLS files and port, no leader election (one scheduler). Without Tandem the extenders
// are removed and nothing else changes. The client's QPS is raised in both settings, as
// scheduler_perf does: kube-scheduler's default of 50 requests/s would cap binding at 50 pods/s and
// hide what the extender costs.
func schedulerConfig(root, out, kubeconfig string, extender, filterOnly bool, extenderPort int, tlsDir string) error {
	src := filepath.Join(root, "deploy", "extender", "kube-scheduler-config.yaml")
	return rewriteSchedulerConfig(src, out, kubeconfig, func(cfg *schedulerv1.KubeSchedulerConfiguration) error {
		if !extender {
			cfg.Extenders = nil
		}
		for i := range cfg.Extenders {
			e := &cfg.Extenders[i]
			if !strings.HasPrefix(e.URLPrefix, "https://127.0.0.1:") || e.TLSConfig == nil {
				return fmt.Errorf("%s: extender %s: the benchmark expects the shipped loopback HTTPS extender", src, e.URLPrefix)
			}
			e.URLPrefix = fmt.Sprintf("https://127.0.0.1:%d", extenderPort)
			if filterOnly {
				e.PrioritizeVerb, e.Weight = "", 0
			}
			for _, f := range []*string{&e.TLSConfig.CAFile, &e.TLSConfig.CertFile, &e.TLSConfig.KeyFile} {
				*f = filepath.Join(tlsDir, filepath.Base(*f))
			}
		}
		return nil
	})
}

// pluginSchedulerConfig writes deploy/scheduler-plugin's configuration for tandem-scheduler with
// the same changes (its YAML references resolved by the decoding).
func pluginSchedulerConfig(root, out, kubeconfig string) error {
	src := filepath.Join(root, "deploy", "scheduler-plugin", "kube-scheduler-config.yaml")
	return rewriteSchedulerConfig(src, out, kubeconfig, func(cfg *schedulerv1.KubeSchedulerConfiguration) error {
		if len(cfg.Extenders) != 0 {
			return fmt.Errorf("%s: the plugin's configuration names extenders", src)
		}
		return nil
	})
}

// rewriteSchedulerConfig decodes the shipped configuration src strictly with kube-scheduler's own
// types, sets this run's kubeconfig, the client QPS and no leader election, lets change do the
// rest, and writes it to out.
func rewriteSchedulerConfig(src, out, kubeconfig string, change func(*schedulerv1.KubeSchedulerConfiguration) error) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read the shipped scheduler configuration: %w", err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return fmt.Errorf("%s is not a KubeSchedulerConfiguration: %w", src, err)
	}
	cfg.ClientConnection.Kubeconfig = kubeconfig
	cfg.ClientConnection.QPS = 5000
	cfg.ClientConnection.Burst = 5000
	cfg.LeaderElection.LeaderElect = ptr.To(false)
	if err := change(&cfg); err != nil {
		return err
	}
	enc, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(out, enc, 0o600)
}

// startScheduler starts kube-scheduler with the configuration schedulerConfig wrote and waits for
// its /healthz.
func (c *cluster) startScheduler(ctx context.Context, bin, cfg string) error {
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return err
	}
	c.schedURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
	c.sched, err = framework.StartDaemon("kube-scheduler", bin, []string{
		"--config=" + cfg,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports[0]),
		"--authentication-kubeconfig=" + c.cp.PKI.Kubeconfig,
		"--authorization-kubeconfig=" + c.cp.PKI.Kubeconfig,
		"--cert-dir=" + filepath.Join(c.dir, "pki", "scheduler"),
	}, nil, filepath.Join(c.dir, "kube-scheduler.log"))
	if err != nil {
		return err
	}
	return controlplane.WaitHTTP(ctx, c.sched, insecureClient(), c.schedURL+"/healthz", "", "", 2*time.Minute)
}

// insecureClient reads kube-scheduler's health and metrics on loopback: it serves a certificate of
// its own making, signed by nobody the benchmark knows.
func insecureClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, self-signed
}

// extenderPolicy returns extender.yaml from deploy/extender/configmap.yaml: the policy as shipped.
func extenderPolicy(root string) ([]byte, error) {
	src := filepath.Join(root, "deploy", "extender", "configmap.yaml")
	b, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(b, &cm); err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	policy, ok := cm.Data["extender.yaml"]
	if !ok {
		return nil, fmt.Errorf("%s has no extender.yaml", src)
	}
	return []byte(policy), nil
}

// startExtender starts tandem-extender as deploy/extender/daemonset.yaml runs it: the shipped
// policy, HTTPS on loopback requiring kube-scheduler's client certificate, plain-HTTP metrics, the
// shipped GOMEMLIMIT.
func (c *cluster) startExtender(ctx context.Context, bin, root string, x extenderTLS) error {
	policy, err := extenderPolicy(root)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(c.dir, "extender.yaml")
	if err := os.WriteFile(cfgPath, policy, 0o600); err != nil {
		return err
	}
	ports, err := controlplane.FreePorts(1)
	if err != nil {
		return err
	}
	c.extenderMetrics = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	c.extender, err = framework.StartDaemon("tandem-extender", bin, []string{
		"--config=" + cfgPath,
		fmt.Sprintf("--listen=127.0.0.1:%d", c.extenderPort),
		"--tls-cert-file=" + x.cert, "--tls-private-key-file=" + x.key, "--tls-client-ca-file=" + x.ca,
		"--metrics-listen=" + strings.TrimPrefix(c.extenderMetrics, "http://"),
		"--kubeconfig=" + c.cp.PKI.Kubeconfig,
	}, append(os.Environ(), "GOMEMLIMIT=900MiB"), filepath.Join(c.dir, "tandem-extender.log"))
	if err != nil {
		return err
	}
	return controlplane.WaitHTTP(ctx, c.extender, &http.Client{Timeout: 5 * time.Second}, c.extenderMetrics+"/readyz", "", "", 3*time.Minute)
}

// startWebhook starts tandem-webhook with the run's serving certificate from files and waits for
// its /readyz (caches synced).
func (c *cluster) startWebhook(ctx context.Context, bin string) error {
	ports, err := controlplane.FreePorts(2)
	if err != nil {
		return err
	}
	c.webhookPort = ports[0]
	c.webhookMetrics = fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	c.webhook, err = framework.StartDaemon("tandem-webhook", bin, []string{
		fmt.Sprintf("--listen=127.0.0.1:%d", c.webhookPort),
		"--metrics-listen=" + strings.TrimPrefix(c.webhookMetrics, "http://"),
		"--kubeconfig=" + c.cp.PKI.Kubeconfig,
		"--tls-cert-file=" + c.cp.PKI.Cert, "--tls-private-key-file=" + c.cp.PKI.Key,
		"--webhook-configuration=tandem-webhook",
	}, nil, filepath.Join(c.dir, "tandem-webhook.log"))
	if err != nil {
		return err
	}
	return controlplane.WaitHTTP(ctx, c.webhook, &http.Client{Timeout: 5 * time.Second}, c.webhookMetrics+"/readyz", "", "", 2*time.Minute)
}

// leftBehind reports every process of the run still alive after stop.
func (c *cluster) leftBehind() error {
	var errs []error
	for _, d := range c.daemons() {
		if d.Exited() == nil {
			errs = append(errs, fmt.Errorf("%s (pid %d) still runs", d.Name(), d.PID()))
		}
	}
	return errors.Join(errs...)
}

// registerShippedWebhooks creates deploy/webhook/webhooks.yaml as shipped (rules, selectors,
// matchConditions, failurePolicy, timeouts), with only what reaches this run's tandem-webhook
// changed: a URL on 127.0.0.1 instead of the in-cluster Service, and the run's CA as caBundle. Both
// kinds hold their webhooks the same way, so one path serves the mutating and the validating
// configuration; the API server validates what is created.
func (c *cluster) registerShippedWebhooks(ctx context.Context, dyn dynamic.Interface, root string) error {
	src := filepath.Join(root, "deploy", "webhook", "webhooks.yaml")
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	kinds := map[string]string{
		"MutatingWebhookConfiguration":   "mutatingwebhookconfigurations",
		"ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
	}
	created := map[string]int{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("%s: %w", src, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		resource, ok := kinds[u.GetKind()]
		if !ok {
			continue
		}
		webhooks, _, _ := unstructured.NestedSlice(obj, "webhooks")
		for i, w := range webhooks {
			path, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "service", "path")
			if path == "" {
				return fmt.Errorf("%s: %s webhook %d has no Service path", src, u.GetKind(), i)
			}
			w.(map[string]any)["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", c.webhookPort, path),
				"caBundle": base64.StdEncoding.EncodeToString(c.cp.PKI.CAPEM),
			}
		}
		if err := unstructured.SetNestedSlice(obj, webhooks, "webhooks"); err != nil {
			return err
		}
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: resource}
		if _, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s %s from %s: %w", u.GetKind(), u.GetName(), src, err)
		}
		created[u.GetKind()]++
	}
	if len(created) != 2 || created["MutatingWebhookConfiguration"] != 1 {
		return fmt.Errorf("%s holds %v: the benchmark expects one mutating and one validating configuration", src, created)
	}
	return nil
}
