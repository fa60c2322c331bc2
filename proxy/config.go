package proxy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tandemkit/tandem/hooks"
)

// Config is tandem-proxy's CRI server configuration. Field names are the flag names operators use.
type Config struct {
	// Listen is the unix socket kubelet connects to (kubelet's --container-runtime-endpoint).
	Listen string `json:"listen"`
	// RuntimeEndpoint is the real runtime's CRI endpoint, unix:// or a bare path.
	RuntimeEndpoint string `json:"runtimeEndpoint"`
	// ImageEndpoint serves the ImageService; empty means RuntimeEndpoint.
	ImageEndpoint string `json:"imageEndpoint"`
	// StateDir holds the store checkpoint.
	StateDir string `json:"stateDir"`
	// SocketMode is the permission of the listen socket.
	SocketMode uint32 `json:"socketMode"`
	// SocketOwner is "uid:gid" for the listen socket; empty means the owner of the runtime's socket.
	SocketOwner string `json:"socketOwner"`
	// MaxMsgSize bounds messages in both directions; kubelet uses 16 MiB.
	MaxMsgSize int `json:"maxMsgSize"`
	// ShutdownTimeout bounds how long in-flight calls may take to finish on SIGTERM.
	ShutdownTimeout time.Duration `json:"shutdownTimeout"`
	// ResyncPeriod is how often the store is reconciled with the runtime, releasing containers that died
	// without the proxy seeing their removal.
	ResyncPeriod time.Duration `json:"resyncPeriod"`
	// RuntimeTimeout bounds each call the proxy makes on its own behalf (recovery, resync, readiness).
	RuntimeTimeout time.Duration `json:"runtimeTimeout"`
	// MaxPodMetadataBytes bounds the labels and annotations (keys and values) of the pod in RunPodSandbox
	// and of the container in CreateContainer; larger ones are refused with InvalidArgument. 0 means
	// hooks.DefaultMaxMetadataBytes: the API server's 256 KiB bound on a pod's annotations, and 64 KiB
	// for labels.
	MaxPodMetadataBytes int `json:"maxPodMetadataBytes"`
	// MaxInflightBytes bounds the bytes of lifecycle requests (the calls the proxy decodes) held at
	// once; a call that does not fit waits, within its deadline, for earlier ones to finish. 0 means
	// DefaultMaxInflightBytes. It must hold at least one message of MaxMsgSize.
	MaxInflightBytes int64 `json:"maxInflightBytes"`
}

// DefaultMaxInflightBytes is twice kubelet's largest message. Lifecycle requests are a few KiB, so this
// holds hundreds of them; only requests near the message limit wait, and the proxy's memory for them
// stays within a few hundred MiB.
const DefaultMaxInflightBytes = 32 << 20

// withDefaults fills the limits left at 0, so a Config built field by field gets the documented ones.
func (c Config) withDefaults() Config {
	if c.MaxPodMetadataBytes == 0 {
		c.MaxPodMetadataBytes = hooks.DefaultMaxMetadataBytes
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(DefaultMaxInflightBytes, int64(c.MaxMsgSize))
	}
	return c
}

// DefaultConfig returns the defaults documented in the README.
func DefaultConfig() Config {
	return Config{
		Listen:          "/var/run/tandem/tandem.sock",
		RuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		StateDir:        "/var/lib/tandem",
		SocketMode:      0o660,
		MaxMsgSize:      16 << 20,
		ShutdownTimeout: 10 * time.Second,
		ResyncPeriod:    time.Minute,
		RuntimeTimeout:  10 * time.Second,
	}
}

// Validate reports every invalid field, naming it as the flag is named.
func (c Config) Validate() error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New("listen: must name a unix socket path"))
	}
	if _, err := socketPath(c.RuntimeEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("runtime-endpoint: %w", err))
	}
	if c.ImageEndpoint != "" {
		if _, err := socketPath(c.ImageEndpoint); err != nil {
			errs = append(errs, fmt.Errorf("image-endpoint: %w", err))
		}
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("state-dir: must name a directory"))
	}
	if c.SocketMode&^0o777 != 0 {
		errs = append(errs, fmt.Errorf("socket-mode: %#o has bits outside 0777", c.SocketMode))
	}
	if c.SocketOwner != "" {
		if _, _, err := parseOwner(c.SocketOwner); err != nil {
			errs = append(errs, fmt.Errorf("socket-owner: %w", err))
		}
	}
	if c.MaxMsgSize < 16<<20 {
		errs = append(errs, fmt.Errorf("max-msg-size: %d is below kubelet's 16 MiB; use at least 16777216", c.MaxMsgSize))
	}
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("shutdown-timeout: must be positive"))
	}
	if c.ResyncPeriod <= 0 {
		errs = append(errs, errors.New("resync-period: must be positive"))
	}
	if c.RuntimeTimeout <= 0 {
		errs = append(errs, errors.New("runtime-timeout: must be positive"))
	}
	if c.MaxPodMetadataBytes < 0 {
		errs = append(errs, fmt.Errorf("max-pod-metadata-bytes: %d is negative; 0 means the default %d", c.MaxPodMetadataBytes, hooks.DefaultMaxMetadataBytes))
	}
	if c.MaxInflightBytes != 0 && c.MaxInflightBytes < int64(c.MaxMsgSize) {
		errs = append(errs, fmt.Errorf("max-inflight-bytes: %d cannot hold one message of max-msg-size %d; use at least that, or 0 for the default", c.MaxInflightBytes, c.MaxMsgSize))
	}
	return errors.Join(errs...)
}

// socketPath turns a CRI endpoint (unix:///path or /path) into a filesystem path.
func socketPath(endpoint string) (string, error) {
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		p := strings.TrimPrefix(endpoint, "unix://")
		if p == "" || !strings.HasPrefix(p, "/") {
			return "", fmt.Errorf("%q: want unix:///absolute/path", endpoint)
		}
		return p, nil
	case strings.HasPrefix(endpoint, "/"):
		return endpoint, nil
	default:
		return "", fmt.Errorf("%q: only unix sockets are supported; want unix:///absolute/path", endpoint)
	}
}
