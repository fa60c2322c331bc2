// Command tandem-proxy is Tandem's node agent as a CRI proxy: kubelet talks to it instead of containerd.
// It forwards every call to the runtime and lets QoS policies adjust pod and container resources on the
// lifecycle calls; the node loops measure, publish, suppress and evict beside it.
package main

import "github.com/tandemkit/tandem/internal/agent"

func main() { agent.Main(agent.Binary{Name: "tandem-proxy"}) }
