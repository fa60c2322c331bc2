// Command tandem-proxy is Tandem's node agent as a CRI proxy: kubelet talks to it instead of containerd.
// It forwards every call to the runtime and lets QoS policies adjust pod and container resources on the
// lifecycle calls; the node loops measure, publish, suppress and evict beside it.
package main

import "github.com/tandemkit/tandem/internal/agent"

// gcPercent gives the garbage collector twice Go's default room. tandem-proxy's live heap (its store and
// the CRI API's descriptors, about 2 MB with 100 containers) sits under Go's 4-MB minimum goal and left it
// 2 MB of allocation between collections where a stateless relay has 3.5; at 200 it has 6. On the CRI
// latency benchmark that took its CPU per relayed call from 1.09-1.11 to 1.02-1.03 times the floor
// proxy's and its sequential p99 ratios from 1.43-2.07 to 0.60-1.30, for 2.2-3.3 MiB more at the peak under load
// (VmHWM 29.5-30.6 against 26.9-27.3 MiB); at rest the heap release gives the room back (anonymous
// memory the same, 7.3 MiB). docs/performance.md has the runs. GOGC in the environment overrides it.
const gcPercent = 200

func main() { agent.Main(agent.Binary{Name: "tandem-proxy", GCPercent: gcPercent}) }
