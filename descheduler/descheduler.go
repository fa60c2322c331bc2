package descheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	v1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/descheduler/config"
	"github.com/tandemkit/tandem/descheduler/lowload"
	"github.com/tandemkit/tandem/descheduler/migration"
)

// Deps are what the descheduler runs on.
type Deps struct {
	Core       kubernetes.Interface
	Dynamic    dynamic.Interface
	Recorder   record.EventRecorder
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Descheduler decides every interval and runs its jobs every second. Run it once, as the leader.
type Descheduler struct {
	cfg  config.Config
	deps Deps

	nodes, pods, jobs, reservations cache.SharedIndexInformer
	factory                         informers.SharedInformerFactory
	dynFactory                      dynamicinformer.DynamicSharedInformerFactory

	detector *lowload.Detector
	ctrl     *migration.Controller

	mu       sync.Mutex
	statuses []lowload.Status
	// allStale is whether the last round found every node stale, to log the change once.
	allStale bool

	decisions *prometheus.CounterVec
	classes   *prometheus.GaugeVec
}

// New wires the informers and the migration controller.
func New(cfg config.Config, deps Deps) (*Descheduler, error) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	d := &Descheduler{cfg: cfg, deps: deps, detector: lowload.NewDetector(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "tandem", Subsystem: "descheduler", Name: "decisions_total",
			Help: "Pods the descheduler decided on, by result: move (a job made), dryRun (reported only), unplaced (no cold node with room: not evicted), limited (a rate limit held it)."},
			[]string{"result"}),
		classes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "tandem", Subsystem: "descheduler", Name: "nodes",
			Help: "Nodes by class in the last round: hot, abnormal, cold, normal, stale (no fresh metric from the agent: nothing is decided for it)."},
			[]string{"class"}),
	}
	mc := migration.DefaultConfig()
	mc.JobTTL = cfg.JobTTL
	ctrl, err := migration.New(mc, migration.Deps{Core: deps.Core, Dynamic: deps.Dynamic, Recorder: deps.Recorder, Now: deps.Now, Registerer: deps.Registerer,
		Target: d.target})
	if err != nil {
		return nil, err
	}
	d.ctrl = ctrl
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{d.decisions, d.classes} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register descheduler metrics: %w", err)
			}
		}
	}
	d.factory = informers.NewSharedInformerFactory(deps.Core, 0)
	d.nodes = d.factory.Core().V1().Nodes().Informer()
	d.pods = d.factory.Core().V1().Pods().Informer()
	if err := d.pods.AddIndexers(cache.Indexers{"node": func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	d.dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(deps.Dynamic, 0)
	d.jobs = d.dynFactory.ForResource(v1alpha1.PodMigrationJobsResource).Informer()
	d.reservations = d.dynFactory.ForResource(v1alpha1.ReservationsResource).Informer()
	return d, nil
}

// Run starts the informers and acts until ctx is done.
func (d *Descheduler) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	d.factory.Start(ctx.Done())
	d.dynFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), d.nodes.HasSynced, d.pods.HasSynced, d.jobs.HasSynced, d.reservations.HasSynced) {
		return errors.New("informers did not sync: are the PodMigrationJob and Reservation CRDs installed (kubectl apply -k deploy/)?")
	}
	logger.Info("Descheduler acting", "interval", d.cfg.Interval, "dryRun", d.cfg.DryRun, "paused", d.cfg.Paused,
		"highThresholds", d.cfg.LowLoad.HighThresholds, "lowThresholds", d.cfg.LowLoad.LowThresholds, "consecutiveAbnormalities", d.cfg.LowLoad.ConsecutiveAbnormalities,
		"maxMigratingPerNode", d.cfg.MaxMigratingPerNode, "maxMigratingPerNamespace", d.cfg.MaxMigratingPerNamespace, "maxMigratingGlobally", d.cfg.MaxMigratingGlobally)
	decide := time.NewTicker(d.cfg.Interval)
	defer decide.Stop()
	reconcile := time.NewTicker(time.Second)
	defer reconcile.Stop()
	d.Decide(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-decide.C:
			d.Decide(ctx)
		case <-reconcile.C:
			d.Reconcile(ctx)
		}
	}
}

// Reconcile moves every job on one step.
func (d *Descheduler) Reconcile(ctx context.Context) {
	for _, j := range d.jobList() {
		if err := d.ctrl.Reconcile(ctx, j); err != nil {
			klog.FromContext(ctx).Error(err, "PodMigrationJob step failed; retrying", "job", j.Name)
		}
	}
}

func (d *Descheduler) jobList() []*v1alpha1.PodMigrationJob {
	var out []*v1alpha1.PodMigrationJob
	for _, obj := range d.jobs.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		j := &v1alpha1.PodMigrationJob{}
		if err := v1alpha1.FromUnstructured(u.DeepCopy(), j); err == nil {
			out = append(out, j)
		}
	}
	return out
}

// Decide classifies the nodes and, unless paused, starts (or in a dry run reports) the moves.
func (d *Descheduler) Decide(ctx context.Context) {
	logger := klog.FromContext(ctx)
	now := d.deps.Now()
	statuses := d.detector.Classify(now, d.cfg.LowLoad, d.nodeInfos(now))
	d.mu.Lock()
	d.statuses = statuses
	d.mu.Unlock()
	counts := map[lowload.Class]int{}
	var summary []string
	for _, st := range statuses {
		counts[st.Class]++
		summary = append(summary, fmt.Sprintf("%s=%s(cpu %.0f%%)", st.Name, st.Class, st.CPUPercent))
		if st.Class == lowload.Hot || st.Class == lowload.Stale {
			logger.V(2).Info("Node", "node", st.Name, "class", st.Class, "why", st.Why)
		}
	}
	for _, c := range []lowload.Class{lowload.Hot, lowload.Abnormal, lowload.Cold, lowload.Normal, lowload.Stale} {
		d.classes.WithLabelValues(string(c)).Set(float64(counts[c]))
	}
	allStale := len(statuses) > 0 && counts[lowload.Stale] == len(statuses)
	if allStale != d.allStale {
		if allStale {
			logger.Info("Agents' data is stale on every node: the descheduler decides nothing until fresh tandem.io/node-metric arrives (is tandem-proxy running and reporting?)",
				"nodes", len(statuses), "nodeMetricExpiration", d.cfg.LowLoad.MetricExpiration)
		} else {
			logger.Info("Agents' data is fresh again")
		}
		d.allStale = allStale
	}
	logger.V(1).Info("Descheduling round", "nodes", strings.Join(summary, " "))
	if d.cfg.Paused {
		return
	}
	jobs := d.jobList()
	limit := d.limiter(jobs)
	moves, unplaced := lowload.Plan(d.cfg.LowLoad, statuses, limit)
	for _, u := range unplaced {
		d.decisions.WithLabelValues("unplaced").Inc()
		logger.Info("Pod not moved: no room reserved for it, so it is not evicted", "pod", klog.KObj(u.Pod), "node", u.From, "why", u.Why)
		d.deps.Recorder.Eventf(u.Pod, corev1.EventTypeNormal, "MigrationSkipped", "Not moved off hot node %s: %s; a pod is evicted only once room is reserved for it", u.From, u.Why)
	}
	for _, m := range moves {
		if d.cfg.DryRun {
			d.decisions.WithLabelValues("dryRun").Inc()
			logger.Info("Dry run: would move pod", "pod", klog.KObj(m.Pod), "from", m.From, "to", m.To, "why", m.Why)
			d.deps.Recorder.Eventf(m.Pod, corev1.EventTypeNormal, "WouldMigrate", "Dry run: would reserve room on %s and move the pod there from %s: %s", m.To, m.From, m.Why)
			d.deps.Recorder.Eventf(nodeRef(m.From), corev1.EventTypeNormal, "WouldMigrate", "Dry run: would move pod %s/%s to %s: %s", m.Pod.Namespace, m.Pod.Name, m.To, m.Why)
			continue
		}
		if _, err := d.ctrl.Create(ctx, m); err != nil {
			logger.Error(err, "Move not started", "pod", klog.KObj(m.Pod))
			continue
		}
		d.decisions.WithLabelValues("move").Inc()
		logger.Info("Moving pod", "pod", klog.KObj(m.Pod), "from", m.From, "to", m.To, "why", m.Why)
	}
}

// limiter allows a move while the jobs under way, and those of this round, stay within the limits. A
// pod that has a job, under way or finished, is not moved again: its job is named after it, and one
// that failed (a PodDisruptionBudget) would fail again; it may be chosen again once the job is collected.
func (d *Descheduler) limiter(jobs []*v1alpha1.PodMigrationJob) func(*corev1.Pod, string) bool {
	perNode, perNS, total := map[string]int{}, map[string]int{}, 0
	busy := map[types.UID]bool{}
	for _, j := range jobs {
		if j.Spec.PodRef == nil {
			continue
		}
		busy[j.Spec.PodRef.UID] = true
		if j.Done() {
			continue
		}
		perNode[j.Annotations[migration.SourceAnnotation]]++
		perNS[j.Spec.PodRef.Namespace]++
		total++
	}
	within := func(n, limit int) bool { return limit <= 0 || n < limit }
	return func(p *corev1.Pod, from string) bool {
		if busy[p.UID] {
			return false
		}
		if !within(perNode[from], d.cfg.MaxMigratingPerNode) || !within(perNS[p.Namespace], d.cfg.MaxMigratingPerNamespace) || !within(total, d.cfg.MaxMigratingGlobally) {
			d.decisions.WithLabelValues("limited").Inc()
			return false
		}
		perNode[from]++
		perNS[p.Namespace]++
		total++
		return true
	}
}

// nodeInfos builds each node's view: its pods and the room active reservations hold on it.
func (d *Descheduler) nodeInfos(now time.Time) []*lowload.NodeInfo {
	reserved := map[string][2]int64{}
	for _, obj := range d.reservations.GetStore().List() {
		r, err := v1alpha1.ReservationFrom(obj)
		if err != nil || !r.Active(metaNow(now)) {
			continue
		}
		req := r.Requests()
		cpu, mem := req[batchCPU], req[batchMemory]
		v := reserved[r.Status.NodeName]
		reserved[r.Status.NodeName] = [2]int64{v[0] + cpu.Value(), v[1] + mem.Value()}
	}
	var out []*lowload.NodeInfo
	for _, obj := range d.nodes.GetStore().List() {
		n, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		info := &lowload.NodeInfo{Node: n, ReservedCPU: reserved[n.Name][0], ReservedMemory: reserved[n.Name][1]}
		pods, _ := d.pods.GetIndexer().ByIndex("node", n.Name)
		for _, po := range pods {
			if p, ok := po.(*corev1.Pod); ok && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				info.Pods = append(info.Pods, p)
			}
		}
		out = append(out, info)
	}
	return out
}

// target chooses a node for a job that names none, from the last round.
func (d *Descheduler) target(pod *corev1.Pod) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return lowload.Target(d.cfg.LowLoad, d.statuses, pod)
}
