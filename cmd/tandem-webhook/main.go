// Command tandem-webhook is Tandem's pod admission webhook: it applies ClusterColocationProfiles to
// new pods and refuses pods a node would refuse. See docs/colocation-profile.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/admission"
	"github.com/tandemkit/tandem/admission/certs"
	"github.com/tandemkit/tandem/internal/flagfile"
)

type options struct {
	listen, metricsListen, kubeconfig             string
	namespace, service, secret, configuration     string
	tlsCertFile, tlsKeyFile                       string
	excluded                                      []string
	auditInterval, lookupTimeout, shutdownTimeout time.Duration
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		klog.ErrorS(err, "tandem-webhook stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

// load resolves the options: flags over TANDEM_WEBHOOK_<FLAG> variables over the config file over
// defaults.
func load(args []string, getenv func(string) string) (*options, error) {
	var o options
	var configFile string
	fs := pflag.NewFlagSet("tandem-webhook", pflag.ContinueOnError)
	fs.StringVar(&configFile, "config", "", "YAML or JSON config file; its keys are the camelCase forms of these flags (metricsListen, excludedNamespaces, ...; tlsKeyFile for --tls-private-key-file)")
	fs.StringVar(&o.listen, "listen", ":9443", "address to serve the admission webhooks on, over HTTPS")
	fs.StringVar(&o.metricsListen, "metrics-listen", ":9080", "address to serve /healthz, /readyz and /metrics on, over plain HTTP")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	ns := getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "koordinator-system"
	}
	fs.StringVar(&o.namespace, "namespace", ns, "namespace of the webhook's Service and certificate Secret (default: $POD_NAMESPACE)")
	fs.StringVar(&o.service, "service-name", "tandem-webhook", "the webhook's Service: its serving certificate names it")
	fs.StringVar(&o.secret, "secret-name", "tandem-webhook-tls", "Secret holding the self-made CA and serving certificate, shared by the replicas")
	fs.StringVar(&o.configuration, "webhook-configuration", "tandem-webhook", "Mutating- and ValidatingWebhookConfiguration whose caBundle the webhook keeps current")
	fs.StringVar(&o.tlsCertFile, "tls-cert-file", "", "serving certificate from a file (cert-manager); the webhook then neither makes certificates nor touches caBundle")
	fs.StringVar(&o.tlsKeyFile, "tls-private-key-file", "", "private key of --tls-cert-file")
	fs.StringSliceVar(&o.excluded, "excluded-namespaces", []string{"kube-system", "koordinator-system"}, "namespaces the webhook configurations leave out; the admission audit leaves them out too")
	fs.DurationVar(&o.auditInterval, "audit-interval", 30*time.Second, "how often pods admitted without the webhook are looked for")
	fs.DurationVar(&o.lookupTimeout, "lookup-timeout", 2*time.Second, "bound on a GET of a namespace or PriorityClass the caches do not hold yet")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "time for reviews in flight at SIGTERM")
	cmd := flagfile.Command{Flags: fs, Bindings: configKeys(), ConfigFlag: "config"}
	for i, b := range cmd.Bindings {
		cmd.Bindings[i].Env = flagfile.EnvName("TANDEM_WEBHOOK_", b.Flag)
	}
	if _, err := cmd.Load(args, getenv); err != nil {
		return nil, err
	}
	if (o.tlsCertFile == "") != (o.tlsKeyFile == "") {
		return nil, errors.New("set both --tls-cert-file and --tls-private-key-file, or neither")
	}
	return &o, nil
}

// configKeys binds each flag to its config-file key: the flag's name in camelCase, but tlsKeyFile,
// as tandem-extender's file names it.
func configKeys() []flagfile.Binding {
	return []flagfile.Binding{
		{Flag: "listen", Key: "listen"},
		{Flag: "metrics-listen", Key: "metricsListen"},
		{Flag: "kubeconfig", Key: "kubeconfig"},
		{Flag: "namespace", Key: "namespace"},
		{Flag: "service-name", Key: "serviceName"},
		{Flag: "secret-name", Key: "secretName"},
		{Flag: "webhook-configuration", Key: "webhookConfiguration"},
		{Flag: "tls-cert-file", Key: "tlsCertFile"},
		{Flag: "tls-private-key-file", Key: "tlsKeyFile"},
		{Flag: "excluded-namespaces", Key: "excludedNamespaces"},
		{Flag: "audit-interval", Key: "auditInterval"},
		{Flag: "lookup-timeout", Key: "lookupTimeout"},
		{Flag: "shutdown-timeout", Key: "shutdownTimeout"},
	}
}

func run(ctx context.Context) error {
	o, err := load(os.Args[1:], os.Getenv)
	if err != nil {
		return err
	}
	logger := klog.Background().WithName("tandem-webhook")
	ctx = klog.NewContext(ctx, logger)

	restCfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %q (empty means in-cluster): %w", o.kubeconfig, err)
	}
	restCfg.UserAgent = "tandem-webhook"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("build dynamic client: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var src certs.Source
	if o.tlsCertFile != "" {
		if src, err = certs.NewFiles(o.tlsCertFile, o.tlsKeyFile, 0); err != nil {
			return err
		}
	} else {
		if src, err = certs.NewSelfSigned(client, certs.Config{
			Namespace: o.namespace, SecretName: o.secret, ServiceName: o.service,
			MutatingWebhookConfigurations:   []string{o.configuration},
			ValidatingWebhookConfigurations: []string{o.configuration},
		}); err != nil {
			return err
		}
	}
	if err := certs.RegisterMetrics(reg, src); err != nil {
		return err
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	nsInformer := factory.Core().V1().Namespaces()
	pcInformer := factory.Scheduling().V1().PriorityClasses()
	podInformer := factory.Core().V1().Pods()
	lookup := &clusterLookup{client: client, namespaces: nsInformer.Lister(), classes: pcInformer.Lister(), timeout: o.lookupTimeout}
	// Registered now, so that factory.Start starts it: the audit reads pods through its lister.
	_ = podInformer.Informer()

	profiles := admission.NewProfiles(reg)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	profInformer := dynFactory.ForResource(admission.ProfileResource)
	refresh := func() {
		objs, err := profInformer.Lister().List(labels.Everything())
		if err != nil {
			logger.Error(err, "List ClusterColocationProfiles from the cache")
			return
		}
		us := make([]*unstructured.Unstructured, 0, len(objs))
		for _, obj := range objs {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				us = append(us, u)
			}
		}
		profiles.Update(ctx, us)
	}
	if _, err := profInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { refresh() },
		UpdateFunc: func(any, any) { refresh() },
		DeleteFunc: func(any) { refresh() },
	}); err != nil {
		return fmt.Errorf("watch ClusterColocationProfiles: %w", err)
	}

	handler := admission.NewHandler(admission.NewMutator(lookup, profiles.List, rand.IntN), reg)
	audit := admission.NewAudit(podInformer.Lister(), lookup, profiles.List, o.excluded, reg)

	synced := make(chan struct{})
	ready := func() bool {
		select {
		case <-synced:
			return src.Ready()
		default:
			return false
		}
	}
	mux := http.NewServeMux()
	mux.Handle(admission.MutatePodPath, handler)
	mux.Handle(admission.ValidatePodPath, handler)
	mux.Handle(admission.ValidateProfilePath, handler)
	plain := http.NewServeMux()
	plain.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	plain.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "caches not synced or no serving certificate yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	plain.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))

	webhook := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		// The API server gives a webhook 10 s at most (timeoutSeconds).
		ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second,
		TLSConfig:   &tls.Config{GetCertificate: src.GetCertificate, MinVersion: tls.VersionTLS12},
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	metrics := &http.Server{Handler: plain, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	wl, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	ml, err := net.Listen("tcp", o.metricsListen)
	if err != nil {
		return errors.Join(fmt.Errorf("listen on %s: %w", o.metricsListen, err), wl.Close())
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 4)
	done := make(chan struct{})
	go func() { errs <- fmt.Errorf("serve webhooks on %s: %w", o.listen, webhook.ServeTLS(wl, "", "")) }()
	go func() { errs <- fmt.Errorf("serve metrics on %s: %w", o.metricsListen, metrics.Serve(ml)) }()
	go func() {
		defer close(done)
		certErr := make(chan error, 1)
		go func() { certErr <- src.Run(runCtx) }()
		factory.Start(runCtx.Done())
		dynFactory.Start(runCtx.Done())
		for typ, ok := range factory.WaitForCacheSync(runCtx.Done()) {
			if !ok {
				logger.Info("Cache did not sync", "type", typ.String())
			}
		}
		// Without the CRD the list fails forever, and the webhook stays unready: say why.
		hint := time.AfterFunc(30*time.Second, func() {
			logger.Info("ClusterColocationProfiles still not listed after 30s; the webhook stays unready until they are: is the CRD (deploy/webhook/crd.yaml) applied, and may the service account list them?")
		})
		dynFactory.WaitForCacheSync(runCtx.Done())
		hint.Stop()
		if runCtx.Err() == nil {
			refresh()
			close(synced)
			logger.Info("Caches synced", "profiles", len(profiles.List()))
			audit.Run(runCtx, o.auditInterval)
		}
		factory.Shutdown()
		dynFactory.Shutdown()
		if err := <-certErr; err != nil {
			logger.Error(err, "Certificate loop stopped")
		}
	}()
	logger.Info("Serving admission webhooks", "address", wl.Addr().String(), "metricsAddress", ml.Addr().String(),
		"namespace", o.namespace, "service", o.service, "selfSignedCertificate", o.tlsCertFile == "",
		"excludedNamespaces", strings.Join(o.excluded, ","))

	var first error
	select {
	case first = <-errs:
	case <-ctx.Done():
	}
	logger.Info("Shutting down")
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer stop()
	var all []error
	if first != nil {
		all = append(all, first)
	}
	for _, s := range []*http.Server{webhook, metrics} {
		if err := s.Shutdown(shutdownCtx); err != nil {
			all = append(all, err)
		}
	}
	cancel()
	<-done
	return errors.Join(all...)
}
