package floorproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ServeUnix serves p on a new unix socket at listen until ctx is cancelled. A socket file left there by
// an earlier run is removed first. When pprofSocket is not empty, Go's CPU profile and execution trace of
// the process are served on that unix socket too, so the floor's profile can be set beside
// tandem-proxy's (whose debug socket serves the same paths).
func ServeUnix(ctx context.Context, p *Proxy, listen, pprofSocket string) error {
	if err := os.Remove(listen); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the stale floor socket %s: %w", listen, err)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "unix", listen)
	if err != nil {
		return fmt.Errorf("floor proxy listen on %s: %w", listen, err)
	}
	if pprofSocket != "" {
		plis, err := lc.Listen(ctx, "unix", pprofSocket)
		if err != nil {
			_ = lis.Close()
			return fmt.Errorf("floor proxy profile socket %s: %w", pprofSocket, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = hs.Serve(plis) // ends with ErrServerClosed once Close below runs
		}()
		defer func() {
			_ = hs.Close()
			<-served
		}()
	}
	return p.Serve(ctx, lis)
}

// CRIMaxMsgSize is kubelet's CRI message limit, which the floor accepts and sends on both legs.
const CRIMaxMsgSize = 16 << 20

// NewCRI returns a floor for the CRI in front of backendTarget, with kubelet's message limit. With
// unaryFastPath it relays the unary methods of the CRI's runtime and image services with one Invoke, as a
// proxy that knows the CRI can; without, it is a pure frame pump.
func NewCRI(backendTarget string, unaryFastPath bool) (*Proxy, error) {
	var unary []string
	if unaryFastPath {
		unary = UnaryMethods(&runtimeapi.RuntimeService_ServiceDesc, &runtimeapi.ImageService_ServiceDesc)
	}
	return New(backendTarget, CRIMaxMsgSize, unary...)
}
