package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	schedulerv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/e2e/framework"
)

// ExtenderSchedulerConfig is deploy/'s KubeSchedulerConfiguration with
// tandem-extender; StartExtender runs kube-scheduler with it.
const ExtenderSchedulerConfig = "extender/kube-scheduler-config.yaml"

// ExtenderOptions configure StartExtender.
type ExtenderOptions struct {
	// SchedulerName is the profile of the second kube-scheduler: pods with
	// this spec.schedulerName go through tandem-extender, every other pod
	// stays with the cluster's own scheduler.
	SchedulerName string
	// Ignorable, when set, replaces the extender's ignorable of deploy/'s
	// configuration.
	Ignorable *bool
	// Binary is a tandem-extender to run; empty builds ./cmd/tandem-extender
	// of this checkout.
	Binary string
	// Args are added to tandem-extender's command line.
	Args []string
	// SchedulerConfig is the KubeSchedulerConfiguration to start from;
	// empty means deploy/'s, which is what the tier checks. Another file
	// lets a changed configuration be tried before deploy/ ships it.
	SchedulerConfig string
}

// StartExtender starts tandem-extender against the cluster (as
// cluster-admin) on a free local port, waits until it is ready, and starts a
// second kube-scheduler whose configuration is deploy/'s with the private
// values substituted: the cluster's scheduler kubeconfig, no leader
// election, the extender's local URL and opts.SchedulerName as its only
// profile. It returns the extender's URL. StopExtender stops both; so does
// Down.
func (c *Cluster) StartExtender(ctx context.Context, opts ExtenderOptions) (string, error) {
	if opts.SchedulerName == "" {
		return "", errors.New("extender options: set SchedulerName, the profile pods name to use the extender")
	}
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = framework.BuildCommand(ctx, filepath.Join(c.Dir, "bin"), TandemExtender); err != nil {
			return "", err
		}
	}
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	schedConfig := filepath.Join(c.Dir, "kube-scheduler-extender.yaml")
	if err := writeExtenderSchedulerConfig(schedConfig, filepath.Join(c.Dir, "scheduler.kubeconfig"), url, opts); err != nil {
		return "", err
	}
	add := func(name, bin string, args ...string) *daemon {
		d := &daemon{
			Name: name, Bin: bin, Args: args,
			Log: filepath.Join(c.Dir, "logs", name+".log"),
			PID: filepath.Join(c.Dir, "run", name+".pid"),
		}
		c.Daemons[name] = d
		return d
	}
	ext := add(TandemExtender, bin, append([]string{
		fmt.Sprintf("--listen=127.0.0.1:%d", ports[0]),
		"--kubeconfig=" + c.Kubeconfig,
		"--v=2",
	}, opts.Args...)...)
	sched := add(ExtenderScheduler, filepath.Join(filepath.Dir(c.Kubectl), KubeScheduler),
		"--config="+schedConfig,
		"--secure-port=0",
		"--v=2",
	)
	// Saved first, so that `cluster down` from another process finds them
	// even if this one dies half-way.
	if err := c.save(); err != nil {
		return "", err
	}
	logger := klog.FromContext(ctx)
	t := time.Now()
	if err := ext.start(); err != nil {
		return "", err
	}
	if err := waitHTTPOK(ctx, ext, url+"/readyz", time.Minute); err != nil {
		return "", err
	}
	logger.Info("Started", "daemon", TandemExtender, "pid", ext.pid(), "url", url, "elapsed", time.Since(t).Round(time.Millisecond))
	t = time.Now()
	if err := sched.start(); err != nil {
		return "", err
	}
	// It has no port to ask; a config it rejects ends it within moments.
	time.Sleep(2 * time.Second)
	if sched.pid() == 0 {
		return "", fmt.Errorf("%s exited during start: see %s: %s", ExtenderScheduler, sched.Log, sched.logTail())
	}
	logger.Info("Started", "daemon", ExtenderScheduler, "pid", sched.pid(), "schedulerName", opts.SchedulerName, "elapsed", time.Since(t).Round(time.Millisecond))
	return url, nil
}

// StopExtender stops what StartExtender started and forgets it.
func (c *Cluster) StopExtender(ctx context.Context) error {
	var errs []error
	for _, name := range []string{ExtenderScheduler, TandemExtender} {
		d := c.Daemons[name]
		if d == nil {
			continue
		}
		if err := d.stop(ctx, syscall.SIGTERM, 10*time.Second); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(c.Daemons, name)
	}
	if err := c.save(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// writeExtenderSchedulerConfig writes deploy/'s KubeSchedulerConfiguration,
// decoded strictly with kube-scheduler's v1 types so that a field it does not
// know fails here, with the values that name the node's paths and services
// replaced by the cluster's.
func writeExtenderSchedulerConfig(path, kubeconfig, url string, opts ExtenderOptions) error {
	src := opts.SchedulerConfig
	if src == "" {
		var err error
		if src, err = deployFile(ExtenderSchedulerConfig); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read scheduler config: %w", err)
	}
	var cfg schedulerv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return fmt.Errorf("%s is not a KubeSchedulerConfiguration: %w", src, err)
	}
	if gv := schedulerv1.SchemeGroupVersion.String(); cfg.APIVersion != gv || cfg.Kind != "KubeSchedulerConfiguration" {
		return fmt.Errorf("%s is a %s %s: want a %s KubeSchedulerConfiguration", src, cfg.APIVersion, cfg.Kind, gv)
	}
	if len(cfg.Extenders) != 1 {
		return fmt.Errorf("%s has %d extenders, want 1: update the cluster tier with it", src, len(cfg.Extenders))
	}
	cfg.ClientConnection.Kubeconfig = kubeconfig
	cfg.LeaderElection.LeaderElect = ptr.To(false)
	cfg.Profiles = []schedulerv1.KubeSchedulerProfile{{SchedulerName: ptr.To(opts.SchedulerName)}}
	cfg.Extenders[0].URLPrefix = url
	if opts.Ignorable != nil {
		cfg.Extenders[0].Ignorable = *opts.Ignorable
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode scheduler config: %w", err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write scheduler config: %w", err)
	}
	return nil
}

// waitHTTPOK polls url until it answers 200, failing early when d exits.
func waitHTTPOK(ctx context.Context, d *daemon, url string, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if d.pid() == 0 {
			return false, fmt.Errorf("%s exited during start: see %s: %s", d.Name, d.Log, d.logTail())
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		last = httpOK(cctx, http.DefaultClient, url)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not become ready (last error: %v): see %s: %w", d.Name, last, d.Log, err)
	}
	return nil
}
