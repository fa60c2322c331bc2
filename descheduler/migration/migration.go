// Package migration carries out tandem-descheduler's moves as Koordinator PodMigrationJobs in the
// ReservationFirst mode: for each job it reserves the pod's batch capacity on the target node (a
// Reservation the descheduler places itself, Available at once), waits a moment for the schedulers to
// see it, evicts the pod through the Eviction API (PodDisruptionBudgets honoured), and ends the job when
// the pod's controller has put a replacement on the reserved node. A job that cannot reserve never
// evicts; a refused eviction or the job's TTL releases the reservation. Jobs a user creates by hand are
// run the same way, on a target the descheduler chooses.
package migration

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/tandemkit/tandem/apis/scheduling/v1alpha1"
	"github.com/tandemkit/tandem/descheduler/lowload"
)

// Annotations and labels Tandem puts on its jobs and reservations.
const (
	// TargetAnnotation on a job names the node the room is to be reserved on.
	TargetAnnotation = "tandem.io/migration-target"
	// SourceAnnotation on a job names the node the pod leaves.
	SourceAnnotation = "tandem.io/migration-source"
	// JobLabel on a reservation names its job.
	JobLabel = "tandem.io/migration-job"
	// CreatedByLabel marks what tandem-descheduler created.
	CreatedByLabel = "app.kubernetes.io/created-by"
)

// Condition types, Koordinator's names.
const (
	condReservationScheduled = "ReservationScheduled"
	condEviction             = "Eviction"
	condPodScheduled         = "PodScheduled"
)

// Config is how jobs run.
type Config struct {
	// JobTTL ends a job (and releases its reservation) that has not finished by then.
	JobTTL time.Duration
	// Settle is how long after a reservation is Available the pod is evicted: the schedulers' caches
	// must hold the reservation before the replacement is created.
	Settle time.Duration
	// Retention is how long finished jobs and their reservations are kept for `kubectl get`.
	Retention time.Duration
}

// DefaultConfig is a 5-minute TTL, a 2 s settle and an hour of retention.
func DefaultConfig() Config {
	return Config{JobTTL: 5 * time.Minute, Settle: 2 * time.Second, Retention: time.Hour}
}

// Deps are the controller's clients.
type Deps struct {
	Core     kubernetes.Interface
	Dynamic  dynamic.Interface
	Recorder record.EventRecorder
	// Target chooses a node with room for a pod whose job names none (a job a user created); "" when
	// none has room.
	Target func(pod *corev1.Pod) string
	Now    func() time.Time
	// Registerer receives the metrics; nil keeps them unexported.
	Registerer prometheus.Registerer
}

// Controller runs jobs. Reconcile is safe to call from one goroutine at a time.
type Controller struct {
	cfg  Config
	deps Deps

	migrations *prometheus.CounterVec
	lifetimes  prometheus.Histogram
}

// New returns a controller.
func New(cfg Config, deps Deps) (*Controller, error) {
	if deps.Core == nil || deps.Dynamic == nil || deps.Recorder == nil {
		return nil, errors.New("migration needs Core and Dynamic clients and an event Recorder")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Target == nil {
		deps.Target = func(*corev1.Pod) string { return "" }
	}
	c := &Controller{cfg: cfg, deps: deps,
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tandem", Subsystem: "descheduler", Name: "migrations_total",
			Help: "PodMigrationJobs ended, by result (succeeded, failed) and reason (the job's status.reason).",
		}, []string{"result", "reason"}),
		lifetimes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tandem", Subsystem: "descheduler", Name: "reservation_lifetime_seconds",
			Help:    "How long a migration's reservation held room, from Available to taken, failed or expired.",
			Buckets: []float64{1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
		})}
	if deps.Registerer != nil {
		for _, m := range []prometheus.Collector{c.migrations, c.lifetimes} {
			if err := deps.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("register migration metrics: %w", err)
			}
		}
	}
	return c, nil
}

// NewJob is the PodMigrationJob for a move; Create it with the dynamic client.
func NewJob(m lowload.Move, ttl time.Duration) *v1alpha1.PodMigrationJob {
	p := m.Pod
	return &v1alpha1.PodMigrationJob{
		// Named after the pod's UID: one job per pod, however often the planner picks it.
		ObjectMeta: metav1.ObjectMeta{Name: "tandem-" + shorten(p.Name, 40) + "-" + shorten(string(p.UID), 8),
			Labels:      map[string]string{CreatedByLabel: "tandem-descheduler"},
			Annotations: map[string]string{TargetAnnotation: m.To, SourceAnnotation: m.From, "tandem.io/migration-why": m.Why}},
		Spec: v1alpha1.PodMigrationJobSpec{
			TTL:    &metav1.Duration{Duration: ttl},
			Mode:   v1alpha1.PodMigrationJobModeReservationFirst,
			PodRef: &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		},
	}
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Create makes the job for m.
func (c *Controller) Create(ctx context.Context, m lowload.Move) (*v1alpha1.PodMigrationJob, error) {
	u, err := v1alpha1.ToUnstructured(NewJob(m, c.cfg.JobTTL), "PodMigrationJob")
	if err != nil {
		return nil, err
	}
	created, err := c.deps.Dynamic.Resource(v1alpha1.PodMigrationJobsResource).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create the PodMigrationJob for pod %s/%s (is the CRD installed? kubectl apply -k deploy/): %w", m.Pod.Namespace, m.Pod.Name, err)
	}
	job := &v1alpha1.PodMigrationJob{}
	if err := v1alpha1.FromUnstructured(created, job); err != nil {
		return nil, err
	}
	c.deps.Recorder.Eventf(m.Pod, corev1.EventTypeNormal, "Migrating", "tandem-descheduler moves the pod from %s to %s (PodMigrationJob %s): %s", m.From, m.To, job.Name, m.Why)
	c.deps.Recorder.Eventf(nodeRef(m.From), corev1.EventTypeNormal, "Migrating", "Moving pod %s/%s to %s (PodMigrationJob %s): %s", m.Pod.Namespace, m.Pod.Name, m.To, job.Name, m.Why)
	return job, nil
}

// Reconcile moves job one step on and writes its status when it changed.
func (c *Controller) Reconcile(ctx context.Context, job *v1alpha1.PodMigrationJob) error {
	now := c.deps.Now()
	if job.Done() {
		return c.collect(ctx, job, now)
	}
	if job.Spec.Paused {
		return nil
	}
	before := job.Status.Phase + v1alpha1.PodMigrationJobPhase(job.Status.Reason) + v1alpha1.PodMigrationJobPhase(fmt.Sprint(len(job.Status.Conditions)))
	err := c.step(ctx, job, now)
	after := job.Status.Phase + v1alpha1.PodMigrationJobPhase(job.Status.Reason) + v1alpha1.PodMigrationJobPhase(fmt.Sprint(len(job.Status.Conditions)))
	if before != after {
		if uerr := c.writeStatus(ctx, job); uerr != nil {
			return errors.Join(err, uerr)
		}
	}
	return err
}

func (c *Controller) step(ctx context.Context, job *v1alpha1.PodMigrationJob, now time.Time) error {
	ttl := c.cfg.JobTTL
	if job.Spec.TTL != nil && job.Spec.TTL.Duration > 0 {
		ttl = job.Spec.TTL.Duration
	}
	if now.Sub(job.CreationTimestamp.Time) >= ttl {
		c.fail(ctx, job, now, v1alpha1.PodMigrationJobReasonTimeout, fmt.Sprintf("not finished within its TTL %s", ttl))
		return nil
	}
	ref := job.Spec.PodRef
	if ref == nil {
		c.fail(ctx, job, now, v1alpha1.PodMigrationJobReasonMissingPod, "spec.podRef is not set")
		return nil
	}
	switch {
	case !has(job, condReservationScheduled):
		return c.reserve(ctx, job, now)
	case !has(job, condEviction):
		return c.evict(ctx, job, now)
	default:
		return c.waitBound(ctx, job, now)
	}
}

// reserve holds the pod's batch capacity on the target node.
func (c *Controller) reserve(ctx context.Context, job *v1alpha1.PodMigrationJob, now time.Time) error {
	pod, err := c.pod(ctx, job)
	if err != nil || pod == nil {
		return err
	}
	ctrl := metav1.GetControllerOf(pod)
	if ctrl == nil {
		c.fail(ctx, job, now, v1alpha1.PodMigrationJobReasonForbiddenMigratePod, "the pod has no controller to recreate it; it is not evicted")
		return nil
	}
	target := job.Annotations[TargetAnnotation]
	if target == "" {
		target = c.deps.Target(pod)
	}
	if target == "" || target == pod.Spec.NodeName {
		c.fail(ctx, job, now, v1alpha1.PodMigrationJobReasonUnschedulable, "no cold node has room for the pod; nothing was evicted")
		return nil
	}
	rsv := reservationFor(job, pod, ctrl, target, job.CreationTimestamp.Add(c.ttl(job)))
	u, err := v1alpha1.ToUnstructured(rsv, "Reservation")
	if err != nil {
		return err
	}
	res := c.deps.Dynamic.Resource(v1alpha1.ReservationsResource)
	created, err := res.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = res.Get(ctx, rsv.Name, metav1.GetOptions{})
	}
	if err != nil {
		// Retried next round until the TTL: an API hiccup must not leave the pod unmoved for good.
		return fmt.Errorf("create reservation %s: %w", rsv.Name, err)
	}
	// Tandem places its reservations itself: the target was chosen with the extender's rules.
	if rsv, err = v1alpha1.ReservationFrom(created); err != nil {
		return err
	}
	rsv.Status = v1alpha1.ReservationStatus{Phase: v1alpha1.ReservationAvailable, NodeName: target, Allocatable: rsv.Requests(),
		Conditions: []v1alpha1.ReservationCondition{{Type: "Ready", Status: "True", Reason: v1alpha1.ReasonReservationAvailable,
			Message: "placed by tandem-descheduler for PodMigrationJob " + job.Name, LastTransitionTime: metav1.NewTime(now), LastProbeTime: metav1.NewTime(now)}}}
	if u, err = v1alpha1.ToUnstructured(rsv, "Reservation"); err != nil {
		return err
	}
	if _, err := res.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("make reservation %s available on %s: %w", rsv.Name, target, err)
	}
	job.Spec.ReservationOptions = &v1alpha1.PodMigrateReservationOptions{ReservationRef: &corev1.ObjectReference{
		APIVersion: v1alpha1.Group + "/" + v1alpha1.Version, Kind: "Reservation", Name: rsv.Name, UID: created.GetUID()}}
	job.Status.Phase, job.Status.NodeName = v1alpha1.PodMigrationJobRunning, target
	job.Status.Reason, job.Status.Status = "", "Reserved"
	job.Status.Message = fmt.Sprintf("room reserved on %s (reservation %s)", target, rsv.Name)
	setCondition(job, condReservationScheduled, "True", "Reserved", job.Status.Message, now)
	cpu, mem := lowload.BatchRequests(pod)
	klog.FromContext(ctx).Info("Room reserved", "job", job.Name, "pod", klog.KObj(pod), "node", target, "batchCPUMilli", cpu, "batchMemoryBytes", mem)
	c.deps.Recorder.Eventf(pod, corev1.EventTypeNormal, "MigrationReserved", "Reserved %dm batch-cpu and %s batch-memory on %s (Reservation %s) before evicting the pod", cpu,
		resource.NewQuantity(mem, resource.BinarySI), target, rsv.Name)
	return c.writeSpec(ctx, job)
}

// evict evicts the pod once the reservation has settled.
func (c *Controller) evict(ctx context.Context, job *v1alpha1.PodMigrationJob, now time.Time) error {
	if at := conditionTime(job, condReservationScheduled); now.Sub(at) < c.cfg.Settle {
		return nil
	}
	pod, err := c.pod(ctx, job)
	if err != nil || pod == nil {
		if pod == nil && err == nil {
			c.release(ctx, job, now, v1alpha1.ReasonReservationExpired)
		}
		return err
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}}}
	err = c.deps.Core.PolicyV1().Evictions(pod.Namespace).Evict(ctx, ev)
	switch {
	case apierrors.IsTooManyRequests(err):
		c.fail(ctx, job, now, v1alpha1.PodMigrationJobReasonFailedEvict,
			fmt.Sprintf("the Eviction API refused: a PodDisruptionBudget allows no disruption now (%v); the reservation is released", err))
		return nil
	case apierrors.IsNotFound(err):
		// Gone already: its replacement may still take the reservation.
	case err != nil:
		return fmt.Errorf("evict pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	job.Status.Reason = v1alpha1.PodMigrationJobReasonWaitForPodBindReservation
	job.Status.Status = "Evicted"
	job.Status.Message = fmt.Sprintf("pod evicted from %s; waiting for its replacement on %s", pod.Spec.NodeName, job.Status.NodeName)
	setCondition(job, condEviction, "True", "EvictComplete", job.Status.Message, now)
	c.deps.Recorder.Eventf(pod, corev1.EventTypeNormal, "MigrationEvicted", "Evicted to move to %s, where room is reserved (PodMigrationJob %s)", job.Status.NodeName, job.Name)
	return nil
}

// waitBound ends the job when the controller's replacement is bound.
func (c *Controller) waitBound(ctx context.Context, job *v1alpha1.PodMigrationJob, now time.Time) error {
	rsv, err := c.reservation(ctx, job)
	if err != nil {
		return err
	}
	if rsv == nil {
		c.fail(ctx, job, now, "MissingReservation", "the reservation was deleted before the replacement was bound")
		return nil
	}
	evicted := conditionTime(job, condEviction)
	pods, err := c.deps.Core.CoreV1().Pods(job.Spec.PodRef.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the replacement's pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.UID == job.Spec.PodRef.UID || p.Spec.NodeName == "" || !rsv.IsOwner(p) || p.CreationTimestamp.Time.Before(evicted.Add(-time.Second)) {
			continue
		}
		if p.Spec.NodeName != job.Status.NodeName {
			// Another owner pod may take another node (a scale-up); wait for one on the reserved node.
			continue
		}
		job.Status.PodRef = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		setCondition(job, condPodScheduled, "True", "Bound", "replacement "+p.Name+" bound to "+p.Spec.NodeName, now)
		job.Status.Phase, job.Status.Status, job.Status.Reason = v1alpha1.PodMigrationJobSucceeded, "Succeeded", ""
		job.Status.Message = fmt.Sprintf("replacement %s/%s bound to %s, on the room reserved for it", p.Namespace, p.Name, p.Spec.NodeName)
		rsv.Status.Phase = v1alpha1.ReservationSucceeded
		rsv.Status.CurrentOwners = []corev1.ObjectReference{*job.Status.PodRef}
		rsv.Status.Allocated = rsv.Status.Allocatable
		rsv.Status.Conditions = append(rsv.Status.Conditions, v1alpha1.ReservationCondition{Type: "Ready", Status: "False", Reason: v1alpha1.ReasonReservationSucceeded,
			Message: "taken by " + p.Name, LastTransitionTime: metav1.NewTime(now), LastProbeTime: metav1.NewTime(now)})
		if err := c.updateReservationStatus(ctx, rsv); err != nil {
			return err
		}
		c.ended(job, now)
		c.deps.Recorder.Eventf(p, corev1.EventTypeNormal, "Migrated", "Placed on %s in the room reserved by PodMigrationJob %s for %s", p.Spec.NodeName, job.Name, job.Spec.PodRef.Name)
		c.deps.Recorder.Eventf(nodeRef(job.Status.NodeName), corev1.EventTypeNormal, "Migrated", "Pod %s/%s replaced %s here (PodMigrationJob %s)", p.Namespace, p.Name, job.Spec.PodRef.Name, job.Name)
		return nil
	}
	return nil
}

// fail ends job with reason and releases its reservation.
func (c *Controller) fail(ctx context.Context, job *v1alpha1.PodMigrationJob, now time.Time, reason, message string) {
	job.Status.Phase, job.Status.Status, job.Status.Reason, job.Status.Message = v1alpha1.PodMigrationJobFailed, "Failed", reason, message
	c.release(ctx, job, now, v1alpha1.ReasonReservationExpired)
	c.ended(job, now)
	obj := nodeRef(job.Annotations[SourceAnnotation])
	if ref := job.Spec.PodRef; ref != nil {
		obj = &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	}
	c.deps.Recorder.Eventf(obj, corev1.EventTypeWarning, "MigrationFailed", "PodMigrationJob %s: %s: %s", job.Name, reason, message)
	klog.FromContext(ctx).Info("Migration failed", "job", job.Name, "reason", reason, "message", message)
}

// release marks the job's reservation Failed so that it holds nothing.
func (c *Controller) release(ctx context.Context, job *v1alpha1.PodMigrationJob, now time.Time, reason string) {
	rsv, err := c.reservation(ctx, job)
	if err != nil || rsv == nil || rsv.Status.Phase != v1alpha1.ReservationAvailable {
		return
	}
	rsv.Status.Phase = v1alpha1.ReservationFailed
	rsv.Status.Conditions = append(rsv.Status.Conditions, v1alpha1.ReservationCondition{Type: "Ready", Status: "False", Reason: reason,
		Message: "released: " + job.Status.Message, LastTransitionTime: metav1.NewTime(now), LastProbeTime: metav1.NewTime(now)})
	if err := c.updateReservationStatus(ctx, rsv); err != nil {
		klog.FromContext(ctx).Error(err, "Reservation not released; it expires with its TTL", "reservation", rsv.Name)
	}
}

// ended counts the job and its reservation's lifetime.
func (c *Controller) ended(job *v1alpha1.PodMigrationJob, now time.Time) {
	result := "succeeded"
	if job.Status.Phase != v1alpha1.PodMigrationJobSucceeded {
		result = "failed"
	}
	c.migrations.WithLabelValues(result, job.Status.Reason).Inc()
	if at := conditionTime(job, condReservationScheduled); !at.IsZero() {
		c.lifetimes.Observe(now.Sub(at).Seconds())
	}
}

// collect deletes a finished job and its reservation after the retention.
func (c *Controller) collect(ctx context.Context, job *v1alpha1.PodMigrationJob, now time.Time) error {
	last := job.CreationTimestamp.Time
	for _, cd := range job.Status.Conditions {
		if cd.LastTransitionTime.After(last) {
			last = cd.LastTransitionTime.Time
		}
	}
	if now.Sub(last) < c.cfg.Retention {
		return nil
	}
	if r := job.Spec.ReservationOptions; r != nil && r.ReservationRef != nil {
		err := c.deps.Dynamic.Resource(v1alpha1.ReservationsResource).Delete(ctx, r.ReservationRef.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete reservation %s: %w", r.ReservationRef.Name, err)
		}
	}
	err := c.deps.Dynamic.Resource(v1alpha1.PodMigrationJobsResource).Delete(ctx, job.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PodMigrationJob %s: %w", job.Name, err)
	}
	return nil
}

func (c *Controller) ttl(job *v1alpha1.PodMigrationJob) time.Duration {
	if job.Spec.TTL != nil && job.Spec.TTL.Duration > 0 {
		return job.Spec.TTL.Duration
	}
	return c.cfg.JobTTL
}

// pod reads the job's pod; nil (and the job failed) when it is gone or is another pod by that name.
func (c *Controller) pod(ctx context.Context, job *v1alpha1.PodMigrationJob) (*corev1.Pod, error) {
	ref := job.Spec.PodRef
	pod, err := c.deps.Core.CoreV1().Pods(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && ref.UID != "" && pod.UID != ref.UID) || (err == nil && pod.DeletionTimestamp != nil) {
		if !has(job, condEviction) {
			c.fail(ctx, job, c.deps.Now(), v1alpha1.PodMigrationJobReasonMissingPod, "the pod is gone or leaving already")
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return pod, nil
}

// reservation reads the job's reservation, nil when it has none or it is gone.
func (c *Controller) reservation(ctx context.Context, job *v1alpha1.PodMigrationJob) (*v1alpha1.Reservation, error) {
	o := job.Spec.ReservationOptions
	if o == nil || o.ReservationRef == nil {
		return nil, nil
	}
	u, err := c.deps.Dynamic.Resource(v1alpha1.ReservationsResource).Get(ctx, o.ReservationRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get reservation %s: %w", o.ReservationRef.Name, err)
	}
	return v1alpha1.ReservationFrom(u)
}

func (c *Controller) updateReservationStatus(ctx context.Context, rsv *v1alpha1.Reservation) error {
	u, err := v1alpha1.ToUnstructured(rsv, "Reservation")
	if err != nil {
		return err
	}
	if _, err := c.deps.Dynamic.Resource(v1alpha1.ReservationsResource).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update reservation %s: %w", rsv.Name, err)
	}
	return nil
}

// writeSpec saves the job's spec (its reservationRef), then its status.
func (c *Controller) writeSpec(ctx context.Context, job *v1alpha1.PodMigrationJob) error {
	u, err := v1alpha1.ToUnstructured(job, "PodMigrationJob")
	if err != nil {
		return err
	}
	updated, err := c.deps.Dynamic.Resource(v1alpha1.PodMigrationJobsResource).Update(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update PodMigrationJob %s: %w", job.Name, err)
	}
	job.ResourceVersion = updated.GetResourceVersion()
	return nil
}

func (c *Controller) writeStatus(ctx context.Context, job *v1alpha1.PodMigrationJob) error {
	u, err := v1alpha1.ToUnstructured(job, "PodMigrationJob")
	if err != nil {
		return err
	}
	updated, err := c.deps.Dynamic.Resource(v1alpha1.PodMigrationJobsResource).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("update the status of PodMigrationJob %s: %w", job.Name, err)
	}
	job.ResourceVersion = updated.GetResourceVersion()
	return nil
}

// reservationFor is the reservation of job's pod on target: the pod's requests, for its controller's
// pods, until expires, taken once.
func reservationFor(job *v1alpha1.PodMigrationJob, pod *corev1.Pod, ctrl *metav1.OwnerReference, target string, expires time.Time) *v1alpha1.Reservation {
	tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Labels: pod.Labels},
		Spec: corev1.PodSpec{NodeName: target, PriorityClassName: pod.Spec.PriorityClassName, Priority: pod.Spec.Priority, SchedulerName: pod.Spec.SchedulerName}}
	for _, ctr := range pod.Spec.Containers {
		tmpl.Spec.Containers = append(tmpl.Spec.Containers, corev1.Container{Name: ctr.Name, Image: ctr.Image, Resources: corev1.ResourceRequirements{Requests: ctr.Resources.Requests}})
	}
	return &v1alpha1.Reservation{
		ObjectMeta: metav1.ObjectMeta{Name: job.Name, Labels: map[string]string{JobLabel: job.Name, CreatedByLabel: "tandem-descheduler"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.Group + "/" + v1alpha1.Version, Kind: "PodMigrationJob", Name: job.Name, UID: job.UID}}},
		Spec: v1alpha1.ReservationSpec{
			Template:     tmpl,
			Owners:       []v1alpha1.ReservationOwner{{Controller: &v1alpha1.ReservationControllerReference{OwnerReference: *ctrl, Namespace: pod.Namespace}}},
			Expires:      ptr.To(metav1.NewTime(expires)),
			AllocateOnce: ptr.To(true),
		},
	}
}

func has(job *v1alpha1.PodMigrationJob, t string) bool { return !conditionTime(job, t).IsZero() }

func conditionTime(job *v1alpha1.PodMigrationJob, t string) time.Time {
	for _, c := range job.Status.Conditions {
		if c.Type == t && c.Status == "True" {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func setCondition(job *v1alpha1.PodMigrationJob, t, status, reason, message string, now time.Time) {
	for i := range job.Status.Conditions {
		if job.Status.Conditions[i].Type == t {
			job.Status.Conditions[i] = v1alpha1.PodMigrationJobCondition{Type: t, Status: status, Reason: reason, Message: message,
				LastTransitionTime: metav1.NewTime(now), LastProbeTime: metav1.NewTime(now)}
			return
		}
	}
	job.Status.Conditions = append(job.Status.Conditions, v1alpha1.PodMigrationJobCondition{Type: t, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(now), LastProbeTime: metav1.NewTime(now)})
}

// nodeRef is a Node for events, as kubelet refers to it.
func nodeRef(name string) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: name, UID: types.UID(name)}
}

// PodsOnNode lists the pods bound to node that hold resources.
func PodsOnNode(ctx context.Context, core kubernetes.Interface, node string) ([]*corev1.Pod, error) {
	list, err := core.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}
