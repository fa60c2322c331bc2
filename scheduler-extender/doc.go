// Package extender is tandem-extender's engine: an HTTP handler that speaks the kube-scheduler
// extender protocol (the types of k8s.io/kube-scheduler/extender/v1) and a node cache fed by
// client-go informers.
//
// The directory is scheduler-extender so that the repository layout says what runs there, but a
// Go package name cannot hold a hyphen, and "extender" is what callers read at every use
// (extender.NewHandler, extender.Config), so the package is named extender.
//
// Filter rejects a node, with a reason in FailedNodes or FailedAndUnresolvableNodes, when its real
// load is above the usage thresholds, when its tandem.io/node-metric annotation is missing or
// stale, or when its free reclaimable capacity cannot hold the pod's kubernetes.io/batch-*
// request. Prioritize scores 0–10, least loaded first. Both count the estimated usage of pods
// assigned to a node since its last report, which the annotation cannot show yet and which
// kube-scheduler does not tell extenders about. All per-node figures are computed on informer
// events, so a request only looks nodes up and compares numbers.
//
// With WithReservations the cache also watches Koordinator Reservations
// (scheduling.koordinator.sh/v1alpha1, made by tandem-descheduler before it evicts a pod): the
// batch room an active reservation holds on its node is kept from other pods, and a batch pod
// owning one may go to that node only, where the room is its own and scores the maximum. A
// reservation stops holding room once an owner pod is bound to its node, or when it leaves
// Available or expires.
package extender
