// Package lowload decides, from what the agents publish on each Node (the tandem.io/node-metric
// annotation and the batch resources), which nodes run hot and which cold, and which batch pods leave a
// hot node, in the manner of koord-descheduler's LowNodeLoad: a node whose usage stays above its high
// thresholds for a number of consecutive rounds is hot, one below its low thresholds is cold. It writes
// nothing; the migration package acts on what it returns.
package lowload

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/metrics/nodemetric"
)

// Thresholds are percentages of a node's allocatable by resource (cpu, memory), as Koordinator's
// ResourceThresholds.
type Thresholds map[corev1.ResourceName]float64

// Settings is what the decisions read: LowNodeLoad's arguments, resolved.
type Settings struct {
	// HighThresholds: node usage at or above any of them is abnormal.
	HighThresholds Thresholds
	// LowThresholds: node usage below all of them is cold.
	LowThresholds Thresholds
	// ProdHighThresholds: high-priority (LS) usage at or above any of them is abnormal too.
	ProdHighThresholds Thresholds
	// ConsecutiveAbnormalities is how many rounds in a row a node must be abnormal to be hot.
	ConsecutiveAbnormalities int
	// MetricExpiration: a node metric older than this is stale; a stale node is neither hot nor cold.
	MetricExpiration time.Duration
	// NodeSelector limits the nodes looked at; nil is every node.
	NodeSelector labels.Selector
	// Namespaces: pods of Include only (when set), never of Exclude.
	Include, Exclude []string
	// PodSelectors: when set, a pod must match one to move.
	PodSelectors []labels.Selector
	// NodeFit checks the cold node against the pod's node affinity, node selector and tolerations.
	NodeFit bool
	// NumberOfNodes: nothing moves unless at least this many nodes are cold (Koordinator's
	// numberOfNodes); 0 means one is enough.
	NumberOfNodes int
}

// Class is what a node is this round.
type Class string

// The classes.
const (
	Hot    Class = "hot"
	Cold   Class = "cold"
	Normal Class = "normal"
	// Abnormal is above the high thresholds for fewer rounds than it takes to be hot.
	Abnormal Class = "abnormal"
	// Stale: the node's metric is missing or older than MetricExpiration; nothing is decided for it.
	Stale Class = "stale"
)

// NodeInfo is one node as the decisions see it.
type NodeInfo struct {
	Node *corev1.Node
	// Pods are the pods bound to the node that hold resources (not finished).
	Pods []*corev1.Pod
	// Reserved is batch capacity held on the node by active reservations, milli-cores and bytes.
	ReservedCPU, ReservedMemory int64
}

// Status is one node's classification, with its figures.
type Status struct {
	Name  string
	Class Class
	// CPUPercent and MemoryPercent are node usage in percent of allocatable; ProdCPUPercent the LS part.
	CPUPercent, MemoryPercent, ProdCPUPercent float64
	// Streak is how many rounds in a row the node was abnormal.
	Streak int
	// Why says what made the class, in words.
	Why  string
	info *NodeInfo
	m    *nodemetric.NodeMetric
}

// Detector classifies nodes round after round; it keeps each node's abnormal streak. Not safe for
// concurrent use.
type Detector struct {
	streak map[string]int
}

// NewDetector starts every node with no streak.
func NewDetector() *Detector { return &Detector{streak: map[string]int{}} }

// Classify returns every node's status at now, in name order, and updates the streaks.
func (d *Detector) Classify(now time.Time, s Settings, nodes []*NodeInfo) []Status {
	out := make([]Status, 0, len(nodes))
	seen := map[string]bool{}
	for _, n := range nodes {
		if s.NodeSelector != nil && !s.NodeSelector.Matches(labels.Set(n.Node.Labels)) {
			continue
		}
		seen[n.Node.Name] = true
		out = append(out, d.classify(now, s, n))
	}
	for name := range d.streak {
		if !seen[name] {
			delete(d.streak, name)
		}
	}
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (d *Detector) classify(now time.Time, s Settings, n *NodeInfo) Status {
	st := Status{Name: n.Node.Name, info: n}
	m, err := nodemetric.FromNode(n.Node)
	if err != nil || m == nil {
		delete(d.streak, st.Name)
		st.Class, st.Why = Stale, "no tandem.io/node-metric from the node's agent"
		if err != nil {
			st.Why += ": " + err.Error()
		}
		return st
	}
	if age := now.Sub(m.UpdateTime); age > s.MetricExpiration {
		delete(d.streak, st.Name)
		st.Class, st.Why = Stale, fmt.Sprintf("the node's metric is %s old, more than nodeMetricExpirationSeconds %d", age.Round(time.Second), int64(s.MetricExpiration/time.Second))
		return st
	}
	if !ready(n.Node) || n.Node.Spec.Unschedulable {
		delete(d.streak, st.Name)
		st.Class, st.Why = Normal, "not Ready or cordoned"
		return st
	}
	st.m = m
	cpu, mem := allocatable(n.Node)
	st.CPUPercent = percent(m.NodeUsage.CPUMilli, cpu)
	st.MemoryPercent = percent(m.NodeUsage.MemoryBytes, mem)
	st.ProdCPUPercent = percent(m.HPUsage.CPUMilli, cpu)
	var above []string
	check := func(name string, usage float64, th Thresholds, r corev1.ResourceName) {
		if t, ok := th[r]; ok && t > 0 && usage >= t {
			above = append(above, fmt.Sprintf("%s %.0f%% ≥ %.0f%%", name, usage, t))
		}
	}
	check("cpu", st.CPUPercent, s.HighThresholds, corev1.ResourceCPU)
	check("memory", st.MemoryPercent, s.HighThresholds, corev1.ResourceMemory)
	check("prod cpu", st.ProdCPUPercent, s.ProdHighThresholds, corev1.ResourceCPU)
	if len(above) > 0 {
		d.streak[st.Name]++
		st.Streak = d.streak[st.Name]
		st.Class = Abnormal
		if st.Streak >= max(s.ConsecutiveAbnormalities, 1) {
			st.Class = Hot
		}
		st.Why = fmt.Sprintf("%s, %d round(s) in a row (consecutiveAbnormalities %d)", strings.Join(above, ", "), st.Streak, s.ConsecutiveAbnormalities)
		return st
	}
	delete(d.streak, st.Name)
	low := func(usage float64, r corev1.ResourceName) bool {
		t, ok := s.LowThresholds[r]
		return !ok || usage < t
	}
	if len(s.LowThresholds) > 0 && low(st.CPUPercent, corev1.ResourceCPU) && low(st.MemoryPercent, corev1.ResourceMemory) {
		st.Class, st.Why = Cold, fmt.Sprintf("cpu %.0f%%, memory %.0f%%: under the low thresholds", st.CPUPercent, st.MemoryPercent)
		return st
	}
	st.Class, st.Why = Normal, fmt.Sprintf("cpu %.0f%%, memory %.0f%%", st.CPUPercent, st.MemoryPercent)
	return st
}

// Move is one pod to move and the node whose reserved room it moves to.
type Move struct {
	Pod  *corev1.Pod
	From string
	To   string
	// Why says why this pod, from that node, to that node.
	Why string
}

// Unplaced is a pod chosen to leave whose move found no cold node with room: it must not be evicted.
type Unplaced struct {
	Pod  *corev1.Pod
	From string
	Why  string
}

// Plan chooses the pods to move off each hot node and a cold node with room for each, as many as bring
// the hot node's usage under its high thresholds. limit says whether one more move off a node (and in
// a namespace) is allowed now (the migration rate limits); it is asked in order and may say no.
func Plan(s Settings, statuses []Status, limit func(pod *corev1.Pod, from string) bool) (moves []Move, unplaced []Unplaced) {
	var hot, cold []*Status
	for i := range statuses {
		switch statuses[i].Class {
		case Hot:
			hot = append(hot, &statuses[i])
		case Cold:
			cold = append(cold, &statuses[i])
		}
	}
	if len(hot) == 0 || len(cold) == 0 || len(cold) < s.NumberOfNodes {
		return nil, nil
	}
	// The hottest first; the coldest receives first.
	slices.SortStableFunc(hot, func(a, b *Status) int { return cmp.Compare(b.CPUPercent, a.CPUPercent) })
	slices.SortStableFunc(cold, func(a, b *Status) int { return cmp.Compare(a.CPUPercent, b.CPUPercent) })
	room := map[string][2]int64{}
	for _, c := range cold {
		room[c.Name] = freeBatch(c.info)
	}
	for _, h := range hot {
		cpu, mem := allocatable(h.info.Node)
		// What must leave for the node to be under its high thresholds again.
		needCPU := excess(h.m.NodeUsage.CPUMilli, cpu, s.HighThresholds[corev1.ResourceCPU])
		needMem := excess(h.m.NodeUsage.MemoryBytes, mem, s.HighThresholds[corev1.ResourceMemory])
		needCPU = max(needCPU, excess(h.m.HPUsage.CPUMilli, cpu, s.ProdHighThresholds[corev1.ResourceCPU]))
		for _, p := range candidates(s, h.info.Pods) {
			if needCPU <= 0 && needMem <= 0 {
				break
			}
			if limit != nil && !limit(p, h.Name) {
				continue
			}
			pc, pm := BatchRequests(p)
			to := ""
			for _, c := range cold {
				r := room[c.Name]
				if r[0] >= pc && r[1] >= pm && (!s.NodeFit || fits(p, c.info.Node)) {
					to = c.Name
					room[c.Name] = [2]int64{r[0] - pc, r[1] - pm}
					break
				}
			}
			if to == "" {
				unplaced = append(unplaced, Unplaced{Pod: p, From: h.Name, Why: fmt.Sprintf("no cold node has %dm batch-cpu and %d batch-memory free for it", pc, pm)})
				continue
			}
			moves = append(moves, Move{Pod: p, From: h.Name, To: to,
				Why: fmt.Sprintf("%s is hot (%s); %s is cold", h.Name, h.Why, to)})
			needCPU -= max(pc, cpuRequest(p))
			needMem -= pm
		}
	}
	return moves, unplaced
}

// excess is how much of used is above pct percent of total; 0 when pct is not set.
func excess(used, total int64, pct float64) int64 {
	if pct <= 0 || total <= 0 {
		return 0
	}
	return max(used-int64(pct/100*float64(total)), 0)
}

// candidates are the node's pods that may move, in the order they go: batch pods with a controller
// that recreates them elsewhere, in the namespaces and selectors allowed, lowest priority first, then
// the youngest (the least progress lost).
func candidates(s Settings, pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if Movable(s, p) == "" {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(priority(a), priority(b)), startTime(b).Compare(startTime(a)), cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name))
	})
	return out
}

// Movable says why p may not move, "" when it may.
func Movable(s Settings, p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning:
		return "not running"
	case !IsBatch(p):
		return "not a batch pod (only BE pods move; LS, LSR and LSE never do)"
	}
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind == "DaemonSet" || ref.Kind == "Node" {
		return "no controller that would recreate it on another node"
	}
	if len(s.Include) > 0 && !slices.Contains(s.Include, p.Namespace) {
		return "namespace not in evictableNamespaces.include"
	}
	if slices.Contains(s.Exclude, p.Namespace) {
		return "namespace in evictableNamespaces.exclude"
	}
	if len(s.PodSelectors) > 0 && !slices.ContainsFunc(s.PodSelectors, func(sel labels.Selector) bool { return sel.Matches(labels.Set(p.Labels)) }) {
		return "no podSelectors entry selects it"
	}
	return ""
}

// IsBatch reports whether p is a batch (BE) pod: Koordinator's QoS label says BE, or it requests batch
// resources. Anything else (LS, LSR, LSE, or no class) never moves.
func IsBatch(p *corev1.Pod) bool {
	switch p.Labels["koordinator.sh/qosClass"] {
	case "BE":
		return true
	case "LS", "LSR", "LSE", "SYSTEM":
		return false
	}
	c, m := BatchRequests(p)
	return c > 0 || m > 0
}

// BatchRequests sums p's containers' batch-cpu (milli-cores, as Koordinator counts them) and
// batch-memory requests.
func BatchRequests(p *corev1.Pod) (cpu, mem int64) {
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[nodemetric.ResourceBatchCPU]; ok {
			cpu += q.Value()
		}
		if q, ok := c.Resources.Requests[nodemetric.ResourceBatchMemory]; ok {
			mem += q.Value()
		}
	}
	return cpu, mem
}

func cpuRequest(p *corev1.Pod) int64 {
	var out int64
	for _, c := range p.Spec.Containers {
		out += c.Resources.Requests.Cpu().MilliValue()
	}
	return out
}

// freeBatch is the batch capacity a node publishes less its pods' batch requests and its reservations.
func freeBatch(n *NodeInfo) [2]int64 {
	cpuQ := n.Node.Status.Allocatable[nodemetric.ResourceBatchCPU]
	memQ := n.Node.Status.Allocatable[nodemetric.ResourceBatchMemory]
	cpu, mem := cpuQ.Value()-n.ReservedCPU, memQ.Value()-n.ReservedMemory
	for _, p := range n.Pods {
		c, m := BatchRequests(p)
		cpu, mem = cpu-c, mem-m
	}
	return [2]int64{cpu, mem}
}

// fits checks node against p's required node affinity, node selector and taints.
func fits(p *corev1.Pod, node *corev1.Node) bool {
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p).Match(node); !ok {
		return false
	}
	_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, p.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}

func allocatable(n *corev1.Node) (cpu, mem int64) {
	return n.Status.Allocatable.Cpu().MilliValue(), n.Status.Allocatable.Memory().Value()
}

func percent(v, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(v) * 100 / float64(total)
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func priority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

func startTime(p *corev1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

// Target is the coldest cold node with room for pod, "" when none has; for a job whose creator named
// no node.
func Target(s Settings, statuses []Status, pod *corev1.Pod) string {
	best, bestCPU := "", 0.0
	pc, pm := BatchRequests(pod)
	for _, st := range statuses {
		if st.Class != Cold || st.Name == pod.Spec.NodeName {
			continue
		}
		r := freeBatch(st.info)
		if r[0] < pc || r[1] < pm || (s.NodeFit && !fits(pod, st.info.Node)) {
			continue
		}
		if best == "" || st.CPUPercent < bestCPU {
			best, bestCPU = st.Name, st.CPUPercent
		}
	}
	return best
}
