// Package slo reads Koordinator's slo-controller-config, as Tandem reads it.
//
// Operators who run Koordinator keep their node QoS settings in the koordinator-system/slo-controller-config
// ConfigMap. Tandem accepts that ConfigMap's data unchanged (Parse), or the same sections in one YAML/JSON
// file (ParseFile), validates it (Validate) and resolves it for this node's labels (Config.ForNode). Field
// names, defaults and merge rules follow Koordinator's published types; the code is Tandem's own.
//
// Each of the six sections has a cluster strategy and node strategies, each node strategy selecting nodes
// with a metav1.LabelSelector and overriding the cluster strategy field by field (see ForNode):
//
//   - resource-qos-config: per QoS class (lsrClass, also used for LSE pods; lsClass; beClass; systemClass)
//     cpuQOS (group identity / cpu.idle), memoryQOS (memory.min/low/high percentages, Anolis watermarks)
//     and resctrlQOS (L3 CAT range, MBA). Consumed by the QoS policies (hooks/policy): cpu.idle and group
//     identity, memory QoS and RDT. beClass.blkioQOS caps the BE parent's block I/O (the agent, with
//     resource/blkio); other classes' blkioQOS, networkQOS and cgroupRoot are accepted and validated but
//     not applied.
//   - cpu-burst-config: policy (none, cpuBurstOnly, cfsQuotaBurstOnly, auto), cpuBurstPercent for
//     cpu.cfs_burst_us, cfsQuotaBurstPercent and sharePoolThresholdPercent for the cfs-quota burst of LS
//     containers. Consumed by the CPU burst policy.
//   - colocation-config: metric aggregation and reporting, and the thresholds and policies from which the
//     batch-cpu and batch-memory a node offers are computed. Its node overrides are called nodeConfigs and
//     sit beside the inline cluster strategy. Consumed by the node loops (metrics/collector, reporter,
//     reclaim).
//   - resource-threshold-config: BE CPU suppression (cpuset or cfsQuota) and BE eviction on memory usage and
//     on CPU satisfaction. Consumed by the node loops (actuate/suppress, actuate/evict).
//   - system-config: node-wide sysctls (min_free_kbytes and watermark_scale_factor factors, the memcg
//     reaper) and Anolis scheduler knobs. Parsed, validated and resolved, but not yet applied by Tandem;
//     unset knobs resolve to nil so that nothing is written the operator did not ask for.
//   - host-application-config: processes outside Kubernetes (Koordinator's HostApplicationSpec: name,
//     priority, qos LS or BE, cgroupPath {base, parentDir, relativePath}) whose cgroups get their class's
//     treatment. Written inline, like colocation-config, beside nodeConfigs; a matching node config
//     replaces the list whole. Consumed by actuate/hostapp (docs/host-applications.md).
//
// Sections are read one by one: a section that does not parse (its JSON is bad, a key is misspelt or written
// twice, a value has the wrong type) or does not validate is refused and reported by Config.Refused, naming the key, while
// the others apply; KeepLastGood puts the caller's last good value back in its place. Other Koordinator keys
// (cpu-normalization-config, resource-amplification-config) load with a warning;
// any other top-level key is reported by Refused and ignored. JSON is not repaired: a missing comma refuses
// the section, as Koordinator's slo-controller does, so that one ConfigMap means the same to both.
//
// Typical use, on every (re)load: cfg := slo.Parse(data).KeepLastGood(inForce); report cfg.Refused() and
// cfg.Warnings(); r, err := cfg.ForNode(nodeLabels); on error keep the previous resolution.
package slo
