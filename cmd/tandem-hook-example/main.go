// Command tandem-hook-example is a remote hook server for Tandem, written as the worked example of
// docs/hooks.md. It serves Koordinator's RuntimeHookService on a unix socket and, when a container is
// created or its resources updated, gives it the CPU shares and cpuset its pod asks for in annotations:
//
//	example.tandem.io/cpu-shares: "512"
//	example.tandem.io/cpuset: "0-1"
//
// With --hooks-dir it registers itself with tandem-proxy by writing a hooks.d file on start, and removes
// that file when it stops.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/hooks/remote/v1alpha1"
)

func main() {
	// SIGTERM is how systemd and kubelet stop the server; the registration file goes with it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		klog.ErrorS(err, "tandem-hook-example stopped")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
	klog.Flush()
}

func run(ctx context.Context, args []string) error {
	fs := pflag.NewFlagSet("tandem-hook-example", pflag.ContinueOnError)
	listen := fs.String("listen", "/run/tandem-hook-example.sock", "unix socket to serve the runtime hook protocol on")
	hooksDir := fs.String("hooks-dir", "", "tandem-proxy's hooks.d directory (/etc/tandem/hooks.d); if set, register there on start and unregister on exit")
	order := fs.Int("order", 5000, "order of the hook among tandem-proxy's hooks, lower runs first (built-in hooks use 100..999)")
	policy := fs.String("failure-policy", "Ignore", "what tandem-proxy does when this server fails: Fail (the container is not created) or Ignore")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *policy != "Fail" && *policy != "Ignore" {
		return fmt.Errorf("--failure-policy=%q: want Fail or Ignore", *policy)
	}

	logger := klog.Background().WithName("tandem-hook-example")
	ctx = klog.NewContext(ctx, logger)

	lis, err := listenUnix(*listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(withLogger(logger)))
	v1alpha1.RegisterRuntimeHookServiceServer(srv, &exampleHook{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	logger.Info("Serving the runtime hook protocol", "socket", *listen)

	if *hooksDir != "" {
		file, err := register(*hooksDir, *listen, *order, *policy)
		if err != nil {
			srv.Stop()
			return err
		}
		logger.Info("Registered with tandem-proxy", "file", file)
		defer func() {
			if err := os.Remove(file); err != nil {
				logger.Error(err, "Removing the registration file; remove it by hand", "file", file)
				return
			}
			logger.Info("Unregistered from tandem-proxy", "file", file)
		}()
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve on %s: %w", *listen, err)
	}
	logger.Info("Stopping")
	// Calls in flight get a moment to finish; tandem-proxy times them out anyway.
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		srv.Stop()
	}
	return nil
}

// listenUnix listens on path, replacing the socket a previous run left behind (but no other file).
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen on %s: the path exists and is not a socket; choose another --listen", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove the old socket %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (does its directory exist?): %w", path, err)
	}
	return lis, nil
}

// withLogger puts the server's logger into every call's context, so handlers log with
// klog.FromContext like the rest of Tandem.
func withLogger(logger klog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(klog.NewContext(ctx, logger), req)
	}
}
