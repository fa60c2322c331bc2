// Command tandem-extender is the kube-scheduler extender of Tandem: it filters and scores nodes by
// their real load and reclaimable (batch) capacity, read from the Node objects that Tandem's node
// reporter writes. See docs/extender.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	extender "github.com/tandemkit/tandem/scheduler-extender"
)

// defaultListen is the extender's port. It sits next to kube-scheduler's 10259 and is not one of
// the ports Kubernetes components use (10248–10259).
const defaultListen = ":10262"

// options is the whole configuration: serving settings here, the scheduling policy embedded.
// Keys are the JSON names, in the file, as flags (bound below) and as TANDEM_EXTENDER_<KEY> env.
type options struct {
	Listen            string        `json:"listen"`
	MetricsListen     string        `json:"metricsListen"`
	Kubeconfig        string        `json:"kubeconfig"`
	TLSCertFile       string        `json:"tlsCertFile"`
	TLSKeyFile        string        `json:"tlsKeyFile"`
	TLSClientCAFile   string        `json:"tlsClientCAFile"`
	ReadHeaderTimeout time.Duration `json:"readHeaderTimeout"`
	ReadTimeout       time.Duration `json:"readTimeout"`
	WriteTimeout      time.Duration `json:"writeTimeout"`
	IdleTimeout       time.Duration `json:"idleTimeout"`
	ShutdownTimeout   time.Duration `json:"shutdownTimeout"`
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
	opts, err := load(os.Args[1:])
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	nodes, err := extender.NewNodeCache(ctx, client, opts.Config)
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
		"usageThresholds", opts.UsageThresholds, "nodeMetricExpirationSeconds", opts.NodeMetricExpirationSeconds)
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

// load merges defaults, the config file, env and flags (later wins) and validates the result.
func load(args []string) (*options, error) {
	fs := pflag.NewFlagSet("tandem-extender", pflag.ContinueOnError)
	configFile := fs.String("config", "", "YAML or JSON config file; see docs/extender.md for every key")
	fs.String("listen", defaultListen, "address to serve the extender, /healthz, /readyz and /metrics on")
	fs.String("metrics-listen", "", "address to serve /healthz, /readyz and /metrics on over plain HTTP as well, for probes and Prometheus without client certificates; empty: none")
	fs.String("kubeconfig", "", "kubeconfig file; empty uses the in-cluster service account")
	fs.String("tls-cert-file", "", "serving certificate (PEM); with --tls-private-key-file enables HTTPS; reloaded when it changes")
	fs.String("tls-private-key-file", "", "private key (PEM) of --tls-cert-file")
	fs.String("tls-client-ca-file", "", "CA certificates (PEM): with HTTPS, require client certificates signed by one of them (kube-scheduler's tlsConfig.certFile); reloaded when it changes")
	fs.Int64("max-request-body-bytes", extender.DefaultConfig().MaxRequestBodyBytes, "filter/prioritize requests declaring a larger body get HTTP 413, unread")
	fs.Int("max-requests-inflight", extender.DefaultConfig().MaxRequestsInflight, "filter/prioritize requests served at once; more get HTTP 429 with Retry-After, unread")
	fs.Duration("read-header-timeout", 5*time.Second, "time to read request headers")
	fs.Duration("read-timeout", 10*time.Second, "time to read a whole request")
	fs.Duration("write-timeout", 10*time.Second, "time to write a response, from the end of the request headers")
	fs.Duration("idle-timeout", 90*time.Second, "keep-alive connections from kube-scheduler close after this long unused")
	fs.Duration("shutdown-timeout", 10*time.Second, "time for requests in flight at SIGTERM")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}

	v := viper.New()
	defaults, err := toMap(extender.DefaultConfig())
	if err != nil {
		return nil, err
	}
	for k, val := range defaults {
		v.SetDefault(k, val)
	}
	for key, flagName := range map[string]string{
		"listen": "listen", "metricsListen": "metrics-listen", "kubeconfig": "kubeconfig",
		"tlsCertFile": "tls-cert-file", "tlsKeyFile": "tls-private-key-file", "tlsClientCAFile": "tls-client-ca-file",
		"maxRequestBodyBytes": "max-request-body-bytes", "maxRequestsInflight": "max-requests-inflight",
		"readHeaderTimeout": "read-header-timeout", "readTimeout": "read-timeout",
		"writeTimeout": "write-timeout", "idleTimeout": "idle-timeout", "shutdownTimeout": "shutdown-timeout",
	} {
		if err := v.BindPFlag(key, fs.Lookup(flagName)); err != nil {
			return nil, fmt.Errorf("bind flag --%s: %w", flagName, err)
		}
	}
	// usageThresholds.cpu is TANDEM_EXTENDER_USAGETHRESHOLDS_CPU.
	v.SetEnvPrefix("TANDEM_EXTENDER")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if *configFile != "" {
		v.SetConfigFile(*configFile)
		if err := v.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("read config file %s: %w", *configFile, err)
		}
	}
	var opts options
	if err := v.Unmarshal(&opts, func(dc *mapstructure.DecoderConfig) {
		dc.TagName = "json"
		dc.Squash = true
		dc.ErrorUnused = true // a misspelt key must not silently keep its default
	}); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
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

// toMap turns a config into the nested map viper takes as defaults, keyed by JSON names, so that
// every key is known to viper and can come from the environment.
func toMap(cfg extender.Config) (map[string]any, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encode default config: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode default config: %w", err)
	}
	return m, nil
}
