// Command tandem-nri is Tandem's node agent as an NRI plugin: containerd (1.7 or later, NRI enabled)
// calls it at each pod and container lifecycle event, and kubelet keeps talking to containerd. It runs
// the policies and node loops tandem-proxy runs; see docs/install.md for when to choose which.
package main

import (
	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/internal/agent"
	"github.com/tandemkit/tandem/nri"
)

func main() { agent.Main(agent.Binary{Name: "tandem-nri", NRI: newPlugin}) }

func newPlugin(o agent.NRIOptions, d frontend.Deps) (agent.Plugin, error) {
	cfg := nri.DefaultConfig()
	cfg.Socket, cfg.Index, cfg.RequestTimeout = o.Socket, o.Index, o.RequestTimeout
	return nri.New(cfg, d)
}
