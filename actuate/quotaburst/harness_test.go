package quotaburst

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/hooks/policy/cpuburst"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	"github.com/tandemkit/tandem/resource/qos"
)

// The tests run on a fake cgroup v1 tree of plain files (t.TempDir()): the kernel's cgroup files cannot
// be made outside its hierarchy. strictWriter enforces on it the two rules the kernel enforces on the
// real one (checked on Linux 6.18 with cgroup v1): no child quota above its parent's, no quota below the
// cgroup's burst, each refused with EINVAL; TestRealCgroupV1 runs the loop on real cgroups where the
// machine lets it.

// strictWriter writes into a fake v1 tree, refusing what the kernel refuses, and records every write.
type strictWriter struct {
	cgroup.Writer
	cgroup.Tree
	// kernel leaves the rules to the kernel: the tree is a real cgroup hierarchy.
	kernel bool

	mu  sync.Mutex
	log []string
}

func (w *strictWriter) Write(parent string, s cgroup.Settings) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.kernel {
		err := w.Writer.Write(parent, s)
		if err == nil {
			w.log = append(w.log, fmt.Sprintf("%s %v", parent, s.Files)+quotaOf(s))
		}
		return err
	}
	if b, ok := s.Files[cpuburst.FileV1]; ok {
		burst, _ := strconv.ParseInt(b, 10, 64)
		if m, err := w.CPUMax(parent); err == nil && !m.Unlimited() && burst > m.Quota {
			return fmt.Errorf("write burst %d above quota %d of %s: %w", burst, m.Quota, parent, syscall.EINVAL)
		}
		w.log = append(w.log, fmt.Sprintf("%s burst=%d", parent, burst))
	}
	if s.CPUQuota != nil {
		q := *s.CPUQuota
		m, err := w.CPUMax(parent)
		if err != nil {
			return err
		}
		next := cgroup.CPUMax{Quota: q, Period: m.Period}
		if up, err := w.CPUMax(path.Dir(parent)); err == nil && next.Above(up) {
			return fmt.Errorf("quota %d of %s above its parent's %d: %w", q, parent, up.Quota, syscall.EINVAL)
		}
		below, _ := w.Descendants(parent, "cpu")
		for _, d := range below {
			if c, err := w.CPUMax(d); err == nil && c.Above(next) && !next.Unlimited() {
				return fmt.Errorf("quota %d of %s below its child %s's %d: %w", q, parent, d, c.Quota, syscall.EINVAL)
			}
		}
		if b, err := w.ReadFile(parent, cpuburst.FileV1); err == nil && q > 0 {
			if burst, _ := strconv.ParseInt(b, 10, 64); burst > q {
				return fmt.Errorf("quota %d of %s below its burst %d: %w", q, parent, burst, syscall.EINVAL)
			}
		}
		w.log = append(w.log, fmt.Sprintf("%s quota=%d", parent, q))
	}
	return w.Writer.Write(parent, s)
}

func quotaOf(s cgroup.Settings) string {
	if s.CPUQuota == nil {
		return ""
	}
	return " quota=" + strconv.FormatInt(*s.CPUQuota, 10)
}

func (w *strictWriter) writes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.log
	w.log = nil
	return out
}

// podSpec and ctrSpec lay out a pod cgroup and its container cgroups on the fake tree.
type podSpec struct {
	id    string
	quota int64 // the pod cgroup's quota; -1 unlimited
	ctrs  []ctrSpec
}

type ctrSpec struct {
	id    string
	class qos.Class
	quota int64 // the base; the cgroup starts with cgroupQuota when set
	// cgroupQuota is what the cgroup holds at start (a raise an earlier run left); 0: quota.
	cgroupQuota int64
	burst       int64
}

func podParent(id string) string { return "/kubepods/burstable/pod" + id }

func ctrCgroup(pod, ctr string) string { return podParent(pod) + "/" + ctr }

// harness runs a Loop on a fake tree with snapshots it makes.
type harness struct {
	t    testing.TB
	root string
	w    *strictWriter
	l    *Loop
	reg  *prometheus.Registry
	// events are the dry-run Events the loop recorded.
	events *events

	mu        sync.Mutex
	ctrs      []Container
	throttled map[string]int64
	now       time.Time
	latest    *collector.Snapshot
}

func newHarness(t testing.TB, cfg cpuburst.Config, pods ...podSpec) *harness {
	t.Helper()
	return newHarnessVersion(t, 1, cfg, pods...)
}

// newHarnessVersion lays the tree out as cgroup v1 (cpu/<cgroup>/cpu.cfs_quota_us, cpu.cfs_period_us,
// cpu.cfs_burst_us) or v2 (<cgroup>/cpu.max, cpu.max.burst). strictWriter's rules are v1's: on v2 it only
// records.
func newHarnessVersion(t testing.TB, version int, cfg cpuburst.Config, pods ...podSpec) *harness {
	t.Helper()
	root := t.TempDir()
	write := func(rel, v string) {
		p := filepath.Join(root, "cpu", rel)
		if version == 2 {
			p = filepath.Join(root, rel)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cg := func(rel string, quota, burst int64) {
		if version == 2 {
			q := strconv.FormatInt(quota, 10)
			if quota < 0 {
				q = "max"
			}
			write(path.Join(rel, "cpu.max"), q+" 100000")
			write(path.Join(rel, "cpu.max.burst"), strconv.FormatInt(burst, 10))
			return
		}
		write(path.Join(rel, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10))
		write(path.Join(rel, "cpu.cfs_period_us"), "100000")
		write(path.Join(rel, "cpu.cfs_burst_us"), strconv.FormatInt(burst, 10))
	}
	if version == 2 {
		write("cgroup.controllers", "cpu memory")
	}
	cg("/", -1, 0)
	cg("/kubepods", -1, 0)
	cg("/kubepods/burstable", -1, 0)
	h := &harness{t: t, root: root, throttled: map[string]int64{}, now: time.Unix(1_700_000_000, 0), reg: prometheus.NewRegistry(), events: &events{}}
	for _, p := range pods {
		cg(podParent(p.id), p.quota, 0)
		for _, c := range p.ctrs {
			q := c.quota
			if c.cgroupQuota != 0 {
				q = c.cgroupQuota
			}
			cg(ctrCgroup(p.id, c.id), q, c.burst)
			h.ctrs = append(h.ctrs, Container{ID: c.id, Name: "c-" + c.id, PodID: p.id, Namespace: "ns", Pod: "pod-" + p.id,
				Class: c.class, PodCgroupParent: podParent(p.id), Quota: c.quota, Period: 100000, Running: true})
		}
	}
	base, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	h.w = &strictWriter{Writer: base, Tree: base.(cgroup.Tree), kernel: version == 2}
	// Dry-run Events go to h.events; tandem_dry_run_actions_total to h.reg with the loop's metrics.
	dry, err := dryrun.New("node-a", h.reg)
	if err != nil {
		t.Fatal(err)
	}
	dry.SetSink(h.events)
	h.l, err = New(cfg, Deps{Latest: h.snapshot, Containers: h.containers, Cgroups: h.w, Registerer: h.reg, Interval: 10 * time.Millisecond, Dry: dry})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) containers() []Container {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Container, len(h.ctrs))
	copy(out, h.ctrs)
	return out
}

func (h *harness) snapshot() *collector.Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest
}

// container changes what the store says of a container.
func (h *harness) container(id string, f func(*Container)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.ctrs {
		if h.ctrs[i].ID == id {
			f(&h.ctrs[i])
		}
	}
}

// remove takes a container out of the store.
func (h *harness) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.ctrs {
		if h.ctrs[i].ID == id {
			h.ctrs = append(h.ctrs[:i], h.ctrs[i+1:]...)
			return
		}
	}
}

// sample makes the next snapshot, a second after the last: the node uses nodeMilli of 2000, and the
// containers named are throttled during it.
func (h *harness) sample(nodeMilli int64, throttled ...string) *collector.Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = h.now.Add(time.Second)
	for _, id := range throttled {
		h.throttled[id] += 5
	}
	snap := &collector.Snapshot{Time: h.now, Capacity: collector.Usage{CPUMilli: 2000}, Node: collector.Usage{CPUMilli: nodeMilli}}
	for _, c := range h.ctrs {
		snap.Containers = append(snap.Containers, collector.ContainerUsage{
			Target:           collector.Target{ContainerID: c.ID, QoS: c.Class, Namespace: c.Namespace, Pod: c.Pod, Container: c.Name},
			ThrottledPeriods: h.throttled[c.ID], Periods: h.now.Unix(),
		})
	}
	h.latest = snap
	return snap
}

// step samples and runs one Step.
func (h *harness) step(nodeMilli int64, throttled ...string) {
	h.t.Helper()
	_, ctx := ktesting.NewTestContext(h.t)
	h.l.Step(ctx, h.sample(nodeMilli, throttled...))
}

// tryQuota reads a cgroup's quota while the loop runs: a plain file being rewritten reads empty for a
// moment (the kernel's cgroup files never do), which is no answer yet.
func (h *harness) tryQuota(rel string) (int64, bool) {
	m, err := h.w.CPUMax(rel)
	return m.Quota, err == nil
}

// quota reads a cgroup's quota from the tree.
func (h *harness) quota(rel string) int64 {
	h.t.Helper()
	m, err := h.w.CPUMax(rel)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.Quota
}

func (h *harness) set(rel, file string, v int64) {
	h.t.Helper()
	dir := filepath.Join(h.root, "cpu", rel)
	if h.w.Version() == 2 {
		dir = filepath.Join(h.root, rel)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(v, 10)+"\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// metric reads one sample of the loop's metrics, by name and label value ("" for none).
func (h *harness) metric(name, label string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func joined(s []string) string { return strings.Join(s, "; ") }

// events is a dryrun.EventSink that keeps the Events.
type events struct {
	mu  sync.Mutex
	got []*corev1.Event
}

func (e *events) CreateEvent(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
	return ev, nil
}

// take returns the Events recorded since the last take.
func (e *events) take() []*corev1.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.got
	e.got = nil
	return out
}
