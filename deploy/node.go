package deploy

import (
	"embed"
	"io/fs"
)

// The node-side files, by their path below deploy/ (and in NodeFiles).
const (
	// ProxyUnit is tandem-proxy's systemd unit.
	ProxyUnit = "systemd/tandem-proxy.service"
	// KubeletUnitDropIn is the drop-in that orders kubelet.service after the proxy.
	KubeletUnitDropIn = "systemd/kubelet.service.d/10-tandem-proxy.conf"
	// KubeletConfigDropIn is the KubeletConfiguration drop-in that points kubelet
	// at the proxy's socket.
	KubeletConfigDropIn = "kubelet/50-tandem-runtime.conf"
	// NodeRuntimeEndpoint is the endpoint KubeletConfigDropIn names and
	// ProxyUnit's --listen serves.
	NodeRuntimeEndpoint = "unix:///var/run/tandem/tandem.sock"
)

//go:embed systemd/tandem-proxy.service systemd/kubelet.service.d/10-tandem-proxy.conf kubelet/50-tandem-runtime.conf
var nodeFiles embed.FS

// NodeFiles returns the node-side files, read-only, as they are in the
// repository: a binary built from it installs exactly what deploy/ ships.
func NodeFiles() fs.FS { return nodeFiles }
