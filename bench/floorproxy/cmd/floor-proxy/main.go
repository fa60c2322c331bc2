// Command floor-proxy runs the floor proxy of bench/floorproxy as a program of its own: the CRI latency
// benchmark builds it the way tandem-proxy is built (static, the project's build tags, a main of its
// own) and starts it beside tandem-proxy.
//
// The floor used to run from a copy of the benchmark's own executable. That build of the very same
// relay code turned out to relay about 11 % faster than every other build of it measured: this program,
// the same program linking klog and the profile server, a program linking all of proxy.Server, and the
// benchmark itself built without the grpcnotrace tag (docs/performance.md, "One build of the floor was
// faster than the rest"). Nothing in the code differs, only how the linker laid it out, so the floor is
// now built like the program it is measured against.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/floorproxy"
)

// options are the command's flags.
type options struct {
	listen, backend, pprofSocket string
	unary                        bool
	extraWork                    time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.listen, "listen", "", "unix socket to serve the CRI on")
	flag.StringVar(&o.backend, "backend", "", "CRI endpoint to relay to (unix:///run/containerd/containerd.sock)")
	flag.StringVar(&o.pprofSocket, "pprof-socket", "", "unix socket serving Go's CPU profile and trace of this process; empty serves none")
	flag.BoolVar(&o.unary, "unary", true, "relay the CRI's unary methods with one Invoke, as a proxy that knows the CRI can; false leaves a pure frame pump")
	flag.DurationVar(&o.extraWork, "extra-work", 0, "burn this much CPU on every call before relaying it: a floor made slower by a known amount, for the benchmark's check that its verdict catches a slower proxy (crilatency --aa-extra-work)")
	klog.InitFlags(nil)
	flag.Parse()

	logger := klog.Background()
	if o.listen == "" || o.backend == "" {
		logger.Error(nil, "Both --listen and --backend are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := serve(klog.NewContext(ctx, logger), o)
	stop()
	if err != nil {
		logger.Error(err, "Floor proxy")
		os.Exit(1)
	}
}

// serve relays the CRI from o.listen to o.backend until ctx ends.
func serve(ctx context.Context, o options) error {
	p, err := floorproxy.NewCRI(o.backend, o.unary)
	if err != nil {
		return err
	}
	p.SetExtraWork(o.extraWork)
	klog.FromContext(ctx).Info("Floor proxy serving", "listen", o.listen, "backend", o.backend, "unaryFastPath", o.unary, "extraWork", o.extraWork)
	return floorproxy.ServeUnix(ctx, p, o.listen, o.pprofSocket)
}
