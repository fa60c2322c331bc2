//go:build e2e

package cluster_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tandemkit/tandem/e2e/cluster"
	"github.com/tandemkit/tandem/e2e/framework"
)

// The test's webhook: its image (cmd/testwebhook), Deployment and Service.
const (
	webhookImage   = "docker.io/library/tandem-e2e-webhook:1"
	webhookName    = "tandem-e2e-webhook"
	webhookDenial  = "denied by testwebhook" // cmd/testwebhook's DenyMessage
	webhookNSLabel = "tandem.io/e2e-webhook"
	// webhookTarget marks the ConfigMaps the webhook judges: the
	// controller manager's own (kube-root-ca.crt, which every pod's
	// ServiceAccount token volume needs) stay out of its way.
	webhookTarget = "tandem.io/e2e-webhook-target"
)

// TestWebhookPath proves, with real parts and without Tandem's webhook, the
// two paths deploy/'s tandem-webhook needs in this cluster, which has no
// kube-proxy:
//
//  1. Pods on the pod network reach the API server at the machine's address
//     (APIServerForPods, what the cluster gives tandem-webhook as
//     KUBERNETES_SERVICE_HOST/PORT): on each node, a Go client with
//     in-cluster configuration (ServiceAccount token, kube-root-ca.crt, the
//     serving certificate verified for that address) learns its user and
//     the server's version, and busybox's nc connects.
//  2. The API server calls an admission webhook through a Service whose
//     endpoints are pods (--enable-aggregator-routing): an HTTPS webhook,
//     one pod on each node's pod network, behind a Service port 443 -> 9443,
//     is registered by a ValidatingWebhookConfiguration (caBundle,
//     failurePolicy Fail, scoped to the test's namespace); ConfigMap creates
//     there are refused with the webhook's message, by each pod in turn, and
//     allowed once the configuration is gone.
func TestWebhookPath(t *testing.T) {
	ctx := testContext(t, 8*time.Minute)
	cs := client(t)
	host, port, err := suite.c.APIServerForPods()
	if err != nil {
		t.Fatal(err)
	}

	tarball := buildWebhookImage(ctx, t)
	t0 := time.Now()
	if _, err := suite.c.ImportImage(ctx, tarball); err != nil {
		t.Fatal(err)
	}
	t.Logf("imported %s into %s in %s", webhookImage, strings.Join(suite.c.NodeNames(), ", "), time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() { removeImage(context.WithoutCancel(ctx), t, webhookImage) })

	ns := "tandem-e2e-webhook-" + randomSuffix(t)
	createNamespace(ctx, t, cs, ns)

	t.Run("pods reach the API server", func(t *testing.T) {
		for _, n := range suite.c.NodeNames() {
			checkAPIServerFromPod(ctx, t, cs, ns, n, host, port)
		}
	})

	t.Run("the API server calls a webhook behind a Service", func(t *testing.T) {
		caPEM := startWebhook(ctx, t, cs, ns)
		cfgName := webhookName + "-" + ns
		registerWebhook(ctx, t, cs, cfgName, ns, caPEM)

		// The API server learns of the configuration from a watch: until
		// then a create passes, and is undone.
		var first string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			refused, msg := createTarget(ctx, t, cs, ns)
			first = msg
			return refused, nil
		})
		if err != nil {
			t.Fatalf("ConfigMap creates in %s still allowed 30s after %s was registered: %v", ns, cfgName, err)
		}
		// Each create goes to one ready endpoint at random (the webhook
		// closes every connection): both pods, one on each node's pod
		// network, must answer.
		seen := map[string]int{}
		for i := 0; i < 40 && len(seen) < len(suite.c.Nodes); i++ {
			msg := first
			if i > 0 {
				var refused bool
				if refused, msg = createTarget(ctx, t, cs, ns); !refused {
					t.Fatalf("ConfigMap create %d in %s allowed with %s registered", i, ns, cfgName)
				}
			}
			if !strings.Contains(msg, "denied the request") || !strings.Contains(msg, webhookDenial) {
				t.Fatalf("ConfigMap create refused, but not by the webhook: %s", msg)
			}
			_, who, _ := strings.Cut(msg, webhookDenial+" ")
			who, _, _ = strings.Cut(who, ":")
			seen[who]++
		}
		t.Logf("refused: %s; by %v", first, seen)
		if len(seen) < len(suite.c.Nodes) {
			t.Errorf("only %v answered 40 creates: want the webhook's pod on each node", seen)
		}

		if err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, cfgName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var last string
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			refused, msg := createTarget(ctx, t, cs, ns)
			last = msg
			return !refused, nil
		})
		if err != nil {
			t.Fatalf("ConfigMap creates in %s still refused 30s after %s was deleted (last: %s): %v", ns, cfgName, last, err)
		}
	})
}

// buildWebhookImage builds cmd/testwebhook statically into an image with
// hack/image, as `make images` builds Tandem's, and returns the tarball.
func buildWebhookImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "testwebhook")
	run := func(wd string, env []string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, goCommand(), args...)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run(repoPath(t, "e2e/cluster"), []string{"CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-mod=mod"},
		"build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/testwebhook")
	tarball := filepath.Join(dir, "testwebhook.tar")
	run(repoPath(t, "."), nil, "run", "./hack/image", "--binary", bin, "--name", webhookImage, "--out", tarball)
	return tarball
}

func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// removeImage removes an image the test imported from every node.
func removeImage(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	for _, n := range suite.c.NodeNames() {
		ctrd, err := suite.c.Containerd(ctx, n)
		if err != nil {
			t.Errorf("node %s: %v", n, err)
			continue
		}
		if _, err := ctrd.Ctr(ctx, "images", "rm", name); err != nil {
			t.Errorf("node %s: %v", n, err)
		}
	}
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// createNamespace creates the test's namespace, labelled for the webhook's
// namespaceSelector, deletes it when the test ends (waiting until it is
// gone) and waits until pods can run in it: the controller manager has
// created its default ServiceAccount and kube-root-ca.crt.
func createNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{webhookNSLabel: ns}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns, err)
			return
		}
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("namespace %s not gone 2 minutes after its delete: %v", ns, err)
		}
	})
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return false, nil
		}
		_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s has no default ServiceAccount and kube-root-ca.crt within a minute: %v", ns, err)
	}
}

// checkAPIServerFromPod runs, on node, a pod on the pod network with
// KUBERNETES_SERVICE_HOST/PORT set to host and port, as the cluster sets
// them for tandem-webhook: cmd/testwebhook whoami (client-go's in-cluster
// configuration) and busybox's nc. Both must succeed.
func checkAPIServerFromPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, node, host, port string) {
	t.Helper()
	env := []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: host}, {Name: "KUBERNETES_SERVICE_PORT", Value: port}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "apiserver-from-" + node, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{
				{Name: "whoami", Image: webhookImage, ImagePullPolicy: corev1.PullNever, Args: []string{"whoami"}, Env: env},
				{
					// Plain TCP from the busybox image every node has:
					// its wget cannot speak TLS to kube-apiserver (busybox's
					// own TLS fails the handshake with Go's server, and the
					// image has no openssl for wget to use instead).
					Name: "nc", Image: framework.TestImage, ImagePullPolicy: corev1.PullNever, Env: env,
					Command: []string{"/bin/sh", "-c", `nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" -e /bin/true && echo "connected to $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"`},
				},
			},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var p *corev1.Pod
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if p, err = cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		last = fmt.Sprintf("%s: %s", p.Status.Phase, podProblem(p))
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	logs := map[string]string{}
	for _, c := range pod.Spec.Containers {
		b, err := cs.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
		if err != nil {
			b = []byte("(no log: " + err.Error() + ")")
		}
		logs[c.Name] = strings.TrimSpace(string(b))
	}
	if err != nil {
		t.Fatalf("pod %s on %s did not finish within 2 minutes (last: %s; logs %q): %v", pod.Name, node, last, logs, err)
	}
	if p.Status.Phase != corev1.PodSucceeded {
		t.Fatalf("pod %s on %s %s (%s): logs %q", pod.Name, node, p.Status.Phase, podProblem(p), logs)
	}
	if p.Spec.HostNetwork || p.Status.PodIP == "" || p.Status.PodIP == host {
		t.Errorf("pod %s has IP %q (hostNetwork %v): want one on the pod network", pod.Name, p.Status.PodIP, p.Spec.HostNetwork)
	}
	wantUser := "system:serviceaccount:" + ns + ":default"
	if w := logs["whoami"]; !strings.Contains(w, "server https://"+host+":"+port) || !strings.Contains(w, "version "+cluster.KubernetesVersion) || !strings.Contains(w, "user "+wantUser) {
		t.Errorf("whoami from %s on %s printed %q: want server https://%s:%s, version %s, user %s", p.Status.PodIP, node, w, host, port, cluster.KubernetesVersion, wantUser)
	}
	if w := logs["nc"]; !strings.Contains(w, "connected to "+host+":"+port) {
		t.Errorf("busybox nc from %s on %s printed %q: want connected to %s:%s", p.Status.PodIP, node, w, host, port)
	}
	t.Logf("from pod %s on %s: whoami %q; nc %q", p.Status.PodIP, node, logs["whoami"], logs["nc"])
}

// startWebhook runs cmd/testwebhook serve in one pod on each node, with a
// serving certificate for its Service's name, behind a Service port 443 ->
// 9443, and waits until the Service has a ready endpoint on every node. It
// returns the CA that signed the certificate, for caBundle.
//
// The pods name their node rather than go through kube-scheduler: what is
// tested is the API server's path to them, and on this machine, whose two
// nodes share two CPUs, tandem-extender's load-aware filter refuses both
// nodes to a Deployment's pods while the machine is busy (seen: "tandem: cpu
// usage above threshold" after a restart of kube-apiserver).
func startWebhook(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) []byte {
	t.Helper()
	caPEM, certPEM, keyPEM := webhookCerts(t, webhookName+"."+ns+".svc")
	_, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookName + "-tls"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": webhookName}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	for _, n := range suite.c.NodeNames() {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: webhookName + "-" + n, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:                      n,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					Name: "webhook", Image: webhookImage, ImagePullPolicy: corev1.PullNever,
					Args:  []string{"serve", "--cert=/tls/tls.crt", "--key=/tls/tls.key", "--addr=:9443"},
					Env:   []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("NODE_NAME", "spec.nodeName")},
					Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 9443}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}},
						PeriodSeconds: 1,
					},
					VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
				}},
				Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: webhookName + "-tls"}}}},
			},
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: webhookName},
		Spec: corev1.ServiceSpec{
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + webhookName})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		var states []string
		for _, p := range pods.Items {
			states = append(states, fmt.Sprintf("%s %s ready %v %s", p.Name, p.Status.Phase, podReady(&p), podProblem(&p)))
		}
		slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + webhookName})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		nodes := map[string]bool{}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready && e.NodeName != nil {
					nodes[*e.NodeName] = true
				}
			}
		}
		last = fmt.Sprintf("pods %s; ready endpoints on %d nodes", strings.Join(states, "; "), len(nodes))
		return len(nodes) == len(suite.c.Nodes), nil
	})
	if err != nil {
		t.Fatalf("webhook not ready on every node within 2 minutes (last: %s): %v", last, err)
	}
	t.Logf("webhook ready: %s", last)
	return caPEM
}

// webhookCerts returns a new CA and a serving certificate and key it signed
// for dnsName, as PEM.
func webhookCerts(t *testing.T, dnsName string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(3 * time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tandem-e2e-webhook-ca"},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// registerWebhook registers the Service's webhook for ConfigMap creates in
// ns that carry webhookTarget, failurePolicy Fail, and deletes the
// configuration when the test ends.
func registerWebhook(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, ns string, caPEM []byte) {
	t.Helper()
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "configmaps.e2e.tandem.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: webhookName, Path: ptr.To("/validate"), Port: ptr.To[int32](443)},
				CABundle: caPEM,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{webhookNSLabel: ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{webhookTarget: "true"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ValidatingWebhookConfiguration %s: %v", name, err)
		}
	})
}

// createTarget creates a ConfigMap the webhook judges and reports whether
// it was refused, with the API server's message; one that was allowed is
// deleted again.
func createTarget(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) (refused bool, msg string) {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "judged-", Labels: map[string]string{webhookTarget: "true"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return true, err.Error()
	}
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete ConfigMap %s/%s: %v", ns, cm.Name, err)
	}
	return false, "created " + cm.Name
}
