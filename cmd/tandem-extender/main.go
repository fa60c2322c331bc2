// Command tandem-extender is the kube-scheduler extender of Tandem: it filters and scores nodes by
// their real load and reclaimable (batch) capacity, read from the Node objects that Tandem's node
// reporter writes. See docs/extender.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/internal/flagfile"
	extender "github.com/tandemkit/tandem/scheduler-extender"
)

// defaultListen is the extender's port. It sits next to kube-scheduler's 10259 and is not one of
// the ports Kubernetes components use (10248–10259).
const defaultListen = ":10262"

// options is the whole configuration: serving settings here, the scheduling policy embedded. load
// binds each field to its flag, its config-file key (configKeys) and its TANDEM_EXTENDER_<KEY> variable.
type options struct {
	Listen            string
	MetricsListen     string
	Kubeconfig        string
	TLSCertFile       string
	TLSKeyFile        string
	TLSClientCAFile   string
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
	extender.Config
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		klog.ErrorS(err, "tandem-extender stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context) error {
	opts, err := load(os.Args[1:], os.Getenv)
	if err != nil {
		return err
	}
	logger := klog.Background().WithName("tandem-extender")
	ctx = klog.NewContext(ctx, logger)

	restCfg, err := clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %q (empty means in-cluster): %w", opts.Kubeconfig, err)
	}
	restCfg.UserAgent = "tandem-extender"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}

	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("build dynamic client for reservations: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	nodes, err := extender.NewNodeCache(ctx, client, opts.Config, extender.WithReservations(dyn))
	if err != nil {
		return err
	}
	handler, err := extender.NewHandler(opts.Config, nodes, reg)
	if err != nil {
		return err
	}
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	mux := http.NewServeMux()
	mux.Handle("/", handler)
	mux.Handle("GET /metrics", metricsHandler)
	servers := []*server{{name: "extender", addr: opts.Listen, srv: newHTTPServer(ctx, opts, mux)}}
	if opts.TLSCertFile != "" {
		servers[0].srv.TLSConfig, err = extender.NewTLSConfig(ctx, extender.TLSFiles{
			CertFile: opts.TLSCertFile, KeyFile: opts.TLSKeyFile, ClientCAFile: opts.TLSClientCAFile,
		})
		if err != nil {
			return err
		}
	}
	if opts.MetricsListen != "" {
		// Plain HTTP for kubelet's probes and Prometheus, which present no client certificate.
		plain := http.NewServeMux()
		plain.Handle("GET "+extender.HealthzPath, handler)
		plain.Handle("GET "+extender.ReadyzPath, handler)
		plain.Handle("GET /metrics", metricsHandler)
		servers = append(servers, &server{name: "metrics", addr: opts.MetricsListen, srv: newHTTPServer(ctx, opts, plain)})
	}
	for _, s := range servers {
		if s.lis, err = net.Listen("tcp", s.addr); err != nil {
			return fmt.Errorf("listen on %s: %w", s.addr, err)
		}
	}
	serveErr := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			var err error
			if s.srv.TLSConfig != nil {
				err = s.srv.ServeTLS(s.lis, "", "")
			} else {
				err = s.srv.Serve(s.lis)
			}
			serveErr <- fmt.Errorf("serve %s on %s: %w", s.name, s.addr, err)
		}()
	}
	logger.Info("Serving kube-scheduler extender", "address", servers[0].lis.Addr().String(), "tls", opts.TLSCertFile != "",
		"clientCertificates", opts.TLSClientCAFile != "", "metricsAddress", opts.MetricsListen,
		"maxRequestsInflight", opts.MaxRequestsInflight, "maxRequestBodyBytes", opts.MaxRequestBodyBytes,
		"usageThresholds", opts.UsageThresholds, "nodeMetricExpirationSeconds", opts.NodeMetricExpirationSeconds,
		"reservations", nodes.ReservationsWatched())
	go func() {
		if nodes.WaitForSync(ctx) {
			logger.Info("Informer caches synced; ready")
		}
	}()

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	logger.Info("Shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ShutdownTimeout)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.srv.Shutdown(shutdownCtx); err != nil {
			errs = append(errs, fmt.Errorf("shut down the %s server: %w", s.name, err))
		}
	}
	for range servers {
		if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// server is one listener of the process and what serves it.
type server struct {
	name, addr string
	srv        *http.Server
	lis        net.Listener
}

func newHTTPServer(ctx context.Context, opts *options, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		ReadTimeout:       opts.ReadTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       opts.IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// load resolves the options: flags over TANDEM_EXTENDER_<KEY> variables over the config file over
// defaults, and validates them.
func load(args []string, getenv func(string) string) (*options, error) {
	opts := options{Config: extender.DefaultConfig()}
	var configFile string
	fs := pflag.NewFlagSet("tandem-extender", pflag.ContinueOnError)
	fs.StringVar(&configFile, "config", "", "YAML or JSON config file; see docs/extender.md for every key")
	fs.StringVar(&opts.Listen, "listen", defaultListen, "address to serve the extender, /healthz, /readyz and /metrics on")
	fs.StringVar(&opts.MetricsListen, "metrics-listen", "", "address to serve /healthz, /readyz and /metrics on over plain HTTP as well, for probes and Prometheus without client certificates; empty: none")
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.StringVar(&opts.TLSCertFile, "tls-cert-file", "", "serving certificate (PEM); with --tls-private-key-file enables HTTPS; reloaded when it changes")
	fs.StringVar(&opts.TLSKeyFile, "tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	fs.StringVar(&opts.TLSClientCAFile, "tls-client-ca-file", "", "CA certificates (PEM): with HTTPS, require client certificates signed by one of them (kube-scheduler's tlsConfig.certFile); reloaded when it changes")
	fs.Int64Var(&opts.MaxRequestBodyBytes, "max-request-body-bytes", opts.MaxRequestBodyBytes, "filter/prioritize requests declaring a larger body get HTTP 413, unread")
	fs.IntVar(&opts.MaxRequestsInflight, "max-requests-inflight", opts.MaxRequestsInflight, "filter/prioritize requests served at once; more get HTTP 429 with Retry-After, unread")
	fs.DurationVar(&opts.ReadHeaderTimeout, "read-header-timeout", 5*time.Second, "time to read request headers")
	fs.DurationVar(&opts.ReadTimeout, "read-timeout", 10*time.Second, "time to read a whole request")
	fs.DurationVar(&opts.WriteTimeout, "write-timeout", 10*time.Second, "time to write a response, from the end of the request headers")
	fs.DurationVar(&opts.IdleTimeout, "idle-timeout", 90*time.Second, "keep-alive connections from kube-scheduler close after this long unused")
	fs.DurationVar(&opts.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "time for requests in flight at SIGTERM")
	// The scheduling policy nests, as Koordinator's LoadAwareSchedulingArgs do: the file and the
	// environment set it, not the command line.
	policy := pflag.NewFlagSet("tandem-extender policy", pflag.ContinueOnError)
	policy.Int64Var(&opts.UsageThresholds.CPU, "usageThresholds.cpu", opts.UsageThresholds.CPU, "")
	policy.Int64Var(&opts.UsageThresholds.Memory, "usageThresholds.memory", opts.UsageThresholds.Memory, "")
	policy.Int64Var(&opts.NodeMetricExpirationSeconds, "nodeMetricExpirationSeconds", opts.NodeMetricExpirationSeconds, "")
	policy.StringVar((*string)(&opts.ExpiredMetricPolicy.BatchPods), "expiredMetricPolicy.batchPods", string(opts.ExpiredMetricPolicy.BatchPods), "")
	policy.StringVar((*string)(&opts.ExpiredMetricPolicy.OtherPods), "expiredMetricPolicy.otherPods", string(opts.ExpiredMetricPolicy.OtherPods), "")
	policy.Int64Var(&opts.ResourceWeights.CPU, "resourceWeights.cpu", opts.ResourceWeights.CPU, "")
	policy.Int64Var(&opts.ResourceWeights.Memory, "resourceWeights.memory", opts.ResourceWeights.Memory, "")
	policy.Int64Var(&opts.DefaultEstimatedUsage.CPUMilli, "defaultEstimatedUsage.cpuMilli", opts.DefaultEstimatedUsage.CPUMilli, "")
	policy.Int64Var(&opts.DefaultEstimatedUsage.MemoryBytes, "defaultEstimatedUsage.memoryBytes", opts.DefaultEstimatedUsage.MemoryBytes, "")

	cmd := flagfile.Command{Flags: fs, Keys: policy, Bindings: configKeys(), ConfigFlag: "config"}
	for i, b := range cmd.Bindings {
		// usageThresholds.cpu is TANDEM_EXTENDER_USAGETHRESHOLDS_CPU.
		cmd.Bindings[i].Env = flagfile.EnvName("TANDEM_EXTENDER_", b.Key)
	}
	if _, err := cmd.Load(args, getenv); err != nil {
		return nil, err
	}
	if (opts.TLSCertFile == "") != (opts.TLSKeyFile == "") {
		return nil, errors.New("set both --tls-cert-file and --tls-private-key-file, or neither")
	}
	if opts.TLSClientCAFile != "" && opts.TLSCertFile == "" {
		return nil, errors.New("--tls-client-ca-file needs HTTPS: set --tls-cert-file and --tls-private-key-file too")
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	return &opts, nil
}

// configKeys binds each flag to its config-file key (docs/extender.md); a policy setting has no flag
// and is named by its key among the policy's settings.
func configKeys() []flagfile.Binding {
	return []flagfile.Binding{
		{Flag: "listen", Key: "listen"},
		{Flag: "metrics-listen", Key: "metricsListen"},
		{Flag: "kubeconfig", Key: "kubeconfig"},
		{Flag: "tls-cert-file", Key: "tlsCertFile"},
		{Flag: "tls-private-key-file", Key: "tlsKeyFile"},
		{Flag: "tls-client-ca-file", Key: "tlsClientCAFile"},
		{Flag: "max-request-body-bytes", Key: "maxRequestBodyBytes"},
		{Flag: "max-requests-inflight", Key: "maxRequestsInflight"},
		{Flag: "read-header-timeout", Key: "readHeaderTimeout"},
		{Flag: "read-timeout", Key: "readTimeout"},
		{Flag: "write-timeout", Key: "writeTimeout"},
		{Flag: "idle-timeout", Key: "idleTimeout"},
		{Flag: "shutdown-timeout", Key: "shutdownTimeout"},
		{Flag: "usageThresholds.cpu", Key: "usageThresholds.cpu"},
		{Flag: "usageThresholds.memory", Key: "usageThresholds.memory"},
		{Flag: "nodeMetricExpirationSeconds", Key: "nodeMetricExpirationSeconds"},
		{Flag: "expiredMetricPolicy.batchPods", Key: "expiredMetricPolicy.batchPods"},
		{Flag: "expiredMetricPolicy.otherPods", Key: "expiredMetricPolicy.otherPods"},
		{Flag: "resourceWeights.cpu", Key: "resourceWeights.cpu"},
		{Flag: "resourceWeights.memory", Key: "resourceWeights.memory"},
		{Flag: "defaultEstimatedUsage.cpuMilli", Key: "defaultEstimatedUsage.cpuMilli"},
		{Flag: "defaultEstimatedUsage.memoryBytes", Key: "defaultEstimatedUsage.memoryBytes"},
	}
}
