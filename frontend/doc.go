// Package frontend is what Tandem's two front ends stand on: tandem-proxy's CRI server (package proxy)
// and tandem-nri's NRI plugin (package nri). Each sees the pod and container lifecycle in its own
// protocol, turns it into the hooks' types, runs the same hooks.Dispatcher, and turns the merged
// adjustment back into what its runtime takes. The rest is the same for both and lives here:
//
//   - Deps, the collaborators the agent hands either front end;
//   - Writer, which applies what the runtime cannot carry: pod-level cgroup settings (neither CRI nor NRI
//     reaches a pod's cgroup), unified cgroup files on cgroup v1 (runc refuses them) and the RDT class
//     (neither protocol has a field for it);
//   - Locks, which serialises what a front end does to one container, so that a refresh moving it to a
//     new pool does not interleave with its own lifecycle calls;
//   - RDT, the one thing that moves a container's tasks into a resctrl group.
//
// Nothing here speaks CRI or NRI: the conversions stay at each front end's edge.
package frontend
