// Package nri is Tandem's second front end: an NRI plugin, built on containerd/nri's stub, that
// containerd calls at each pod and container lifecycle event. Kubelet keeps talking to containerd; no
// kubelet flag changes and no host service runs before it.
//
// The plugin runs the same hooks.Dispatcher, with the same policies, as the CRI proxy: it turns NRI's
// pods and containers into hooks.PodInfo and hooks.ContainerInfo, and the merged hooks.Adjustment into
// NRI's ContainerAdjustment and ContainerUpdate. A policy cannot tell which front end runs it.
//
// The stages map onto NRI's events:
//
//	PreRunPodSandbox            RunPodSandbox
//	PostStopPodSandbox          StopPodSandbox
//	PreCreateContainer          CreateContainer (the adjustment; an error refuses the container)
//	PreStartContainer           StartContainer
//	PostStartContainer          PostStartContainer
//	PreUpdateContainerResources UpdateContainer (kubelet's updates) and the refresh loop
//	PostStopContainer           StopContainer
//	PostRemoveContainer         RemoveContainer, RemovePodSandbox, and containers gone at Synchronize
//
// What NRI cannot carry, and what the plugin does instead:
//   - A pod's labels, annotations and cgroup parent cannot be changed: NRI adjusts containers, not
//     sandboxes. The plugin keeps the labels and annotations PreRunPodSandbox hooks set in its own store,
//     where later stages and the node loops read them, and recomputes them at Synchronize. A cgroup parent
//     change is logged and dropped: a policy that moves pods between cgroups needs the proxy.
//   - Pod-level cgroup settings (the batch pod's quota, cpu.idle on the pod's cgroup): the plugin writes
//     them to the pod's cgroup itself, with frontend.Writer, as the proxy does.
//   - Container labels cannot be added by NRI; annotations can, and are.
//   - Unified cgroup files on cgroup v1 (runc refuses them) and the RDT class: written by the plugin once
//     the container runs, with frontend.Writer, as the proxy does.
//   - A change decided at PreStartContainer, and pool moves of running containers (an LSE pod took
//     CPUs), reach containerd as unsolicited UpdateContainers from the refresh loop, never from inside an
//     event: containerd holds its NRI lock for the event, so an update sent from it would wait for itself.
//     containerd writes an update to a container that does not run into its spec alone, which a starting
//     container may have made its task from already: such an update, like a PreStartContainer change, is
//     sent again from the loop once PostStartContainer says the container runs.
//
// containerd drops a plugin that does not answer within its plugin_request_timeout (2s by default), so
// each event runs under a deadline a margin shorter than that: a hook that is too slow fails under its own
// failure policy rather than taking the plugin, and every later container, with it.
package nri
