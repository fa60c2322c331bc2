// Package agent is Tandem's node agent, shared by its two binaries: tandem-proxy, a CRI proxy that kubelet
// talks to instead of containerd, and tandem-nri, an NRI plugin that containerd calls. Both run the same
// policies on the lifecycle calls and the same node loops (collector, reporter, suppress, evict); only the
// front end that sees the calls differs. This package wires them, one job a file: flags.go reads the
// flags, variables and config file; wire.go puts one run together, step by step; component.go is the
// interface every node loop runs behind (configure, start, restore on stop) and loops.go builds them;
// serve.go serves /metrics and the debug socket. The NRI front end is passed in by tandem-nri, so
// tandem-proxy does not link containerd/nri (it would grow by 1.9 MB and 1 MiB of RSS at rest).
package agent

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/store"
)

// Binary describes one of the agent's binaries.
type Binary struct {
	// Name is the binary's name, in flags' help and logs.
	Name string
	// NRI, when set, makes the agent an NRI plugin instead of a CRI proxy.
	NRI func(o NRIOptions, deps frontend.Deps) (Plugin, error)
	// GCPercent is the garbage collector's target (GOGC) when the environment sets none; 0 keeps Go's
	// default of 100.
	GCPercent int
}

// gcPercent says which GOGC the process should run with: b.GCPercent, unless the operator set GOGC
// (which Go has already applied) or the binary asks for Go's default.
func gcPercent(b Binary, lookupEnv func(string) (string, bool)) (int, bool) {
	if _, set := lookupEnv("GOGC"); set || b.GCPercent <= 0 {
		return 0, false
	}
	return b.GCPercent, true
}

// NRIOptions are the NRI plugin's own settings.
type NRIOptions struct {
	Socket, Index  string
	RequestTimeout time.Duration
}

// FrontEnd is what the node loops need of the part that sees the lifecycle calls.
type FrontEnd interface {
	// Store is what it knows of the node's pods and containers.
	Store() *store.Store
	// Refresh moves every live container to what the policies decide now, and returns when done.
	Refresh(ctx context.Context) error
	// Ready says whether the runtime is reachable through it (/readyz).
	Ready(ctx context.Context) error
}

// Plugin is the NRI front end.
type Plugin interface {
	FrontEnd
	// Run serves containerd's events until ctx ends, reconnecting when containerd restarts.
	Run(ctx context.Context) error
}

// Main runs the binary until SIGTERM or SIGINT and exits non-zero on failure.
func Main(b Binary) {
	if pct, ok := gcPercent(b, os.LookupEnv); ok {
		debug.SetGCPercent(pct)
	}
	// Heap profiling samples an allocation every 512 KiB and files each sampled stack in a 1.4-MB table,
	// which the samples of a loaded proxy touch page by page: 0.3 MiB of the agent's 7.3 MiB of anonymous
	// memory at rest (docs/performance.md). So it is off unless asked for with GODEBUG=memprofilerate=N,
	// which Go applied before main; CPU profiles and traces on the debug socket do not need it.
	if !godebugSets(os.Getenv("GODEBUG"), "memprofilerate") {
		runtime.MemProfileRate = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, b, os.Args[1:])
	stop()
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		klog.ErrorS(err, b.Name+" exited")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// godebugSets reports whether the GODEBUG value godebug (comma-separated key=value pairs) sets key.
func godebugSets(godebug, key string) bool {
	for _, kv := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); k == key {
			return true
		}
	}
	return false
}
