// Command tandem-descheduler moves batch pods off nodes that stay hot to cold nodes, reserving room on
// the cold node before each eviction (Koordinator's Reservation and PodMigrationJob). Two replicas run;
// a Lease makes one act. See docs/descheduler.md.
package main

import (
	"context"
	"errors"
	"flag"
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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/descheduler"
	"github.com/tandemkit/tandem/descheduler/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, pflag.ErrHelp) {
		klog.ErrorS(err, "tandem-descheduler stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

type options struct {
	config, kubeconfig, metricsAddr, identity string
	dryRun                                    bool
}

func parse(args []string) (options, error) {
	var o options
	fs := pflag.NewFlagSet("tandem-descheduler", pflag.ContinueOnError)
	fs.StringVar(&o.config, "config", "", "koord-descheduler's DeschedulerConfiguration file (LowNodeLoad and MigrationController arguments); empty means the defaults (docs/descheduler.md)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig; empty means in-cluster")
	fs.StringVar(&o.metricsAddr, "metrics-addr", ":10263", "serves /metrics, /healthz and /readyz (ready: leading, or standing by); empty disables")
	fs.BoolVar(&o.dryRun, "dry-run", false, "decide and report (Events WouldMigrate, logs, metrics) without reserving or evicting; overrides the file")
	fs.StringVar(&o.identity, "identity", "", "this replica's name in the Lease; empty means the pod's hostname")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	err := fs.Parse(args)
	return o, err
}

func run(ctx context.Context, args []string) error {
	opts, err := parse(args)
	if err != nil {
		return err
	}
	logger := klog.Background().WithName("tandem-descheduler")
	ctx = klog.NewContext(ctx, logger)
	cfg := config.Default()
	if opts.config != "" {
		raw, err := os.ReadFile(opts.config)
		if err != nil {
			return fmt.Errorf("read the configuration %s: %w", opts.config, err)
		}
		var warnings []string
		cfg, warnings, err = config.Parse(raw)
		for _, w := range warnings {
			logger.Info("Configuration key not acted on", "file", opts.config, "warning", w)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", opts.config, err)
		}
	} else if err := cfg.Validate(); err != nil {
		return err
	}
	if opts.dryRun {
		cfg.DryRun = true
	}
	rc, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig %q (empty means in-cluster): %w", opts.kubeconfig, err)
	}
	rc.UserAgent = "tandem-descheduler"
	core, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("build kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("build dynamic client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "tandem-descheduler"})
	d, err := descheduler.New(cfg, descheduler.Deps{Core: core, Dynamic: dyn, Recorder: recorder, Registerer: reg})
	if err != nil {
		return err
	}
	leading := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "tandem", Subsystem: "descheduler", Name: "leader",
		Help: "1 while this replica holds the Lease and acts, 0 while it stands by."})
	reg.MustRegister(leading)
	if opts.metricsAddr != "" {
		if err := serveMetrics(ctx, opts.metricsAddr, reg); err != nil {
			return err
		}
	}
	act := func(ctx context.Context) {
		leading.Set(1)
		if err := d.Run(ctx); err != nil {
			logger.Error(err, "Descheduler stopped acting")
		}
	}
	if !cfg.LeaderElect {
		logger.Info("Leader election off: this replica acts alone; run one replica only")
		act(ctx)
		return nil
	}
	id := opts.identity
	if id == "" {
		if id, err = os.Hostname(); err != nil {
			return fmt.Errorf("name this replica (pass --identity): %w", err)
		}
	}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: cfg.LeaseNamespace, Name: cfg.LeaseName}, Client: core.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id, EventRecorder: recorder}}
	stopped := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		ReleaseOnCancel: true, Name: cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: act,
			OnStoppedLeading: func() { leading.Set(0); close(stopped) },
			OnNewLeader: func(identity string) {
				logger.Info("Leader", "identity", identity, "self", identity == id)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	<-stopped
	if ctx.Err() == nil {
		// Lost the Lease while acting: stop, so that two replicas never act at once; the Deployment
		// restarts this one as a standby.
		return errors.New("lost the leader Lease; exiting so that only the new leader acts")
	}
	return nil
}

func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	ok := func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) }
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /readyz", ok)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics server stopped", "address", addr)
		}
	}()
	return nil
}
