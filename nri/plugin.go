package nri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/store"
)

// Config configures the plugin.
type Config struct {
	// Socket is containerd's NRI socket.
	Socket string
	// Name and Index register the plugin; containerd calls plugins in index order.
	Name  string
	Index string
	// RequestTimeout is containerd's plugin_request_timeout: a plugin slower than that is dropped.
	RequestTimeout time.Duration
	// Reconnect is the first wait before connecting again after containerd went away; it doubles up to
	// maxReconnect.
	Reconnect time.Duration
}

// DefaultConfig is containerd's defaults.
func DefaultConfig() Config {
	return Config{Socket: api.DefaultSocketPath, Name: "tandem", Index: "40", RequestTimeout: 2 * time.Second, Reconnect: time.Second}
}

// Validate says what is wrong with the configuration, naming the flag.
func (c Config) Validate() error {
	switch {
	case c.Socket == "":
		return fmt.Errorf("nri-socket is empty; give containerd's NRI socket (default %s): %w", api.DefaultSocketPath, errdefs.ErrInvalidArgument)
	case len(c.Index) != 2 || c.Index[0] < '0' || c.Index[0] > '9' || c.Index[1] < '0' || c.Index[1] > '9':
		return fmt.Errorf("nri-plugin-index %q: want two digits (00-99), containerd's plugin order: %w", c.Index, errdefs.ErrInvalidArgument)
	case c.RequestTimeout < 4*eventMargin:
		return fmt.Errorf("nri-request-timeout %s: want at least %s, and the value of containerd's plugin_request_timeout: %w", c.RequestTimeout, 4*eventMargin, errdefs.ErrInvalidArgument)
	}
	return nil
}

// eventMargin is how much sooner than containerd's deadline an event answers: the answer still has to
// travel and be decoded.
const eventMargin = 250 * time.Millisecond

// maxReconnect bounds the wait between connection attempts.
const maxReconnect = 10 * time.Second

// Plugin is Tandem as an NRI plugin.
type Plugin struct {
	cfg     Config
	deps    frontend.Deps
	store   *store.Store
	metrics *metrics
	// writer applies what NRI cannot carry: pod-level settings, container files on cgroup v1, RDT classes.
	writer *frontend.Writer

	// stub is the connection of the moment; nil while not connected.
	stub atomic.Pointer[stubRef]
	// synced is set once the current connection has synchronized, and cleared when it ends.
	synced atomic.Bool
	// kick asks the refresh loop for a pass (a pre-start change, a synchronization); one is enough.
	kick chan struct{}

	// runtimeOOM is containerd's own oom_score_adj, read at connection (unknownScore when unreadable).
	runtimeOOM atomic.Int64
	// procRoot is where containerd's /proc entry is read.
	procRoot string

	// ctrLocks serialises what the plugin does to one container: a refresh must not interleave with the
	// container's own events.
	ctrLocks frontend.Locks
	// specOnly holds the containers whose task may not run what was decided for them: sent an update
	// while not running (containerd writes it into the spec alone, and a container between its task's
	// creation and its start has made the task from that spec already), or given a change at
	// PreStartContainer, which NRI cannot carry. Once the container runs, all of it is sent again.
	specOnly sync.Map // container id → struct{}
}

type stubRef struct{ stub.Stub }

// New returns a plugin ready to Run.
func New(cfg Config, deps frontend.Deps) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	reg := deps.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("register NRI metrics: %w", err)
	}
	st := store.New()
	p := &Plugin{cfg: cfg, deps: deps, store: st, metrics: m, kick: make(chan struct{}, 1), procRoot: "/proc",
		writer: &frontend.Writer{Cgroups: deps.Cgroups, RDT: deps.RDT, Store: st, PodErrors: m.cgroupErrors, ContainerErrors: m.cgroupErrors}}
	p.runtimeOOM.Store(unknownScore)
	return p, nil
}

// Store is what the plugin knows of the node's pods and containers; the node loops read it.
func (p *Plugin) Store() *store.Store { return p.store }

// Ready reports whether containerd has the plugin registered and synchronized; it is what /readyz shows.
func (p *Plugin) Ready(context.Context) error {
	if p.stub.Load() == nil || !p.synced.Load() {
		return fmt.Errorf("not connected to containerd's NRI socket %s (is containerd up, version 1.7 or later, with NRI enabled?): %w",
			p.cfg.Socket, errdefs.ErrUnavailable)
	}
	return nil
}

// Run connects to containerd and serves its events until ctx ends, connecting again whenever containerd
// goes away (a restart, an upgrade). The refresh loop runs beside it.
func (p *Plugin) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("nriSocket", p.cfg.Socket)
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	wg.Go(func() { p.refreshLoop(ctx) })
	defer func() {
		wg.Wait()
		logger.Info("Stopped")
	}()
	wait := p.cfg.Reconnect
	for {
		start := time.Now()
		err := p.serveOnce(ctx)
		if ctx.Err() != nil {
			// containerd goes on without the plugin: new containers get no policy until it is back.
			logger.Info("Stopping: leaving containerd's NRI")
			return nil
		}
		if time.Since(start) > time.Minute {
			// It ran a while: containerd restarted, it did not refuse us; try again soon.
			wait = p.cfg.Reconnect
		}
		logger.Info("NRI connection to containerd lost or refused; connecting again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, maxReconnect)
	}
}

// serveOnce makes one connection, registers, and returns when it ends.
func (p *Plugin) serveOnce(ctx context.Context) error {
	closed := make(chan struct{})
	var once sync.Once
	logger := klog.FromContext(ctx)
	s, err := stub.New(p,
		stub.WithDialer(func(path string) (net.Conn, error) { return p.dial(logger, path) }),
		stub.WithPluginName(p.cfg.Name), stub.WithPluginIdx(p.cfg.Index), stub.WithSocketPath(p.cfg.Socket),
		// Without it the stub exits the process when containerd goes away.
		stub.WithOnClose(func() { once.Do(func() { close(closed) }) }),
		stub.WithLogger(nriLogger{logger.WithName("nri")}))
	if err != nil {
		return fmt.Errorf("create the NRI stub: %w", err)
	}
	p.metrics.connects.Inc()
	// Start returns once containerd has configured and synchronized the plugin.
	if err := s.Start(ctx); err != nil {
		s.Stop()
		return fmt.Errorf("register with containerd's NRI at %s: %w", p.cfg.Socket, err)
	}
	p.stub.Store(&stubRef{s})
	p.metrics.connected.Set(1)
	klog.FromContext(ctx).Info("Registered with containerd's NRI", "plugin", p.cfg.Index+"-"+p.cfg.Name,
		"runtimeNRIVersion", s.RuntimeNRIVersion(), "pods", len(p.store.Snapshot().Pods))
	defer func() {
		p.stub.Store(nil)
		p.synced.Store(false)
		p.metrics.connected.Set(0)
		s.Stop()
	}()
	select {
	case <-closed:
		return errors.New("containerd closed the connection")
	case <-ctx.Done():
		return nil
	}
}

// eventContext bounds an event by containerd's deadline, less the margin the answer needs.
func (p *Plugin) eventContext(ctx context.Context, event string, attrs ...any) (context.Context, context.CancelFunc) {
	logger := klog.FromContext(ctx).WithValues(append([]any{"event", event}, attrs...)...)
	return context.WithTimeout(klog.NewContext(ctx, logger), p.cfg.RequestTimeout-eventMargin)
}

// runHooks runs a stage's hooks; without a dispatcher nothing runs.
func (p *Plugin) runHooks(ctx context.Context, stage hooks.Stage, pod *hooks.PodInfo, ctr *hooks.ContainerInfo) (*hooks.Adjustment, error) {
	if p.deps.Hooks == nil {
		return nil, nil
	}
	return p.deps.Hooks.Run(ctx, stage, pod, ctr)
}

// requestRefresh asks the refresh loop for a pass.
func (p *Plugin) requestRefresh() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// nriLogger sends the stub's log lines to klog: its progress at V(2), its debugging at V(5).
type nriLogger struct{ l klog.Logger }

func (n nriLogger) Debugf(_ context.Context, f string, a ...any) { n.l.V(5).Info(fmt.Sprintf(f, a...)) }
func (n nriLogger) Infof(_ context.Context, f string, a ...any)  { n.l.V(2).Info(fmt.Sprintf(f, a...)) }
func (n nriLogger) Warnf(_ context.Context, f string, a ...any)  { n.l.Info(fmt.Sprintf(f, a...)) }
func (n nriLogger) Errorf(_ context.Context, f string, a ...any) {
	n.l.Error(nil, fmt.Sprintf(f, a...))
}
