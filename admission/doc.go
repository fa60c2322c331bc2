// Package admission is Tandem's pod admission webhook: it makes workloads colocate without
// rewriting their YAML, and refuses at `kubectl apply` time the pods a node would refuse later.
//
//   - Mutation (POST /mutate-pod): every ClusterColocationProfile (config.koordinator.sh/v1alpha1,
//     Koordinator's schema) whose namespaceSelector and selector match a new pod is applied to it,
//     in name order, so that a later profile wins a key an earlier one also sets (the order in
//     which the API server lists them, and so the order Koordinator applies them in). A pod a
//     profile matched that is BE (by the profile or by its own label) has its cpu and memory
//     turned into kubernetes.io/batch-cpu (milli-cores) and
//     kubernetes.io/batch-memory, as Koordinator's webhook does. Every pod with batch resources
//     gets Koordinator's node.koordinator.sh/extended-resource-spec annotation, so a node needs no
//     API lookup to size its cgroups.
//   - Validation (POST /validate-pod): LSE and LSR pods (openFuyao's HLS too) must ask for whole
//     CPUs with requests equal to limits; QoS classes must be known; the resource-spec and
//     extended-resource-spec annotations must parse; batch resources need the BE class. A refusal
//     names the pod, the container and the rule.
//   - Profiles themselves are validated (POST /validate-profile), so a broken selector or patch is
//     refused by `kubectl apply` instead of being skipped later.
//
// The webhook works on the pod's JSON as the API server sent it, not on a decoded corev1.Pod, so
// fields newer than Tandem's k8s.io/api survive admission untouched; the answer is an RFC 6902
// patch of what changed.
//
// Pods admitted while the webhook was down (failurePolicy: Ignore) are found afterwards by Audit:
// a pod a profile should have changed carries no AnnotationProfiles. They are counted by the
// tandem_webhook_unadmitted_pods metric and logged once each.
package admission
