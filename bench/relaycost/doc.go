// Package relaycost holds a Go benchmark that puts tandem-proxy's forwarding
// code (package proxy, in process) beside the floor proxy of
// bench/floorproxy, both in front of the same in-process CRI server. With the
// process boundaries, the real runtime and the scheduler's noise taken away,
// what is left is the cost of each relay path itself: time and allocations
// per call. bench/crilatency measures the whole processes against real
// containerd; see docs/performance.md.
package relaycost
