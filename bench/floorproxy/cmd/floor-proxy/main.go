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

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/bench/floorproxy"
)

func main() {
	listen := flag.String("listen", "", "unix socket to serve the CRI on")
	backend := flag.String("backend", "", "CRI endpoint to relay to (unix:///run/containerd/containerd.sock)")
	pprofSocket := flag.String("pprof-socket", "", "unix socket serving Go's CPU profile and trace of this process; empty serves none")
	unary := flag.Bool("unary", true, "relay the CRI's unary methods with one Invoke, as a proxy that knows the CRI can; false leaves a pure frame pump")
	extraWork := flag.Duration("extra-work", 0, "burn this much CPU on every call before relaying it: a floor made slower by a known amount, for the benchmark's check that its verdict catches a slower proxy (crilatency --aa-extra-work)")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.Background()
	if *listen == "" || *backend == "" {
		logger.Error(nil, "Both --listen and --backend are required")
		os.Exit(2)
	}
	p, err := floorproxy.NewCRI(*backend, *unary)
	if err != nil {
		logger.Error(err, "Floor proxy")
		os.Exit(1)
	}
	p.SetExtraWork(*extraWork)
	logger.Info("Floor proxy serving", "listen", *listen, "backend", *backend, "unaryFastPath", *unary, "extraWork", *extraWork)
	if err := floorproxy.ServeUnix(ctx, p, *listen, *pprofSocket); err != nil {
		logger.Error(err, "Floor proxy")
		os.Exit(1)
	}
}
