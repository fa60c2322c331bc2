// Package hostapp gives processes that run outside Kubernetes, listed in host-application-config
// (Koordinator's HostApplicationSpec), the treatment of their QoS class on their own cgroup, as koordlet
// does for such "out-of-band" applications:
//
//   - LS: cpuset.cpus is the LS (shared) pool, so the application stays off the CPUs LSE and LSR pods
//     hold exclusively, and follows the pool when those pods come and go.
//   - BE: cpuset.cpus is the BE pool, which CPU suppression narrows under the cpuset policy; cpu.idle = 1
//     where the kernel has it; and under the cfsQuota policy the CFS ceiling that suppression puts on
//     the BE pods' parent (actuate/suppress QuotaCeiling) is put on the application's cgroup too.
//
// The application's usage is counted as its class's by suppress and reclaim: the agent adds Targets to
// the collector, which samples each cgroup beside the pods' (an LS application's CPU is high-priority
// use, no longer "system").
//
// # Whose cgroups
//
// The operator creates the cgroups and puts the processes in them (Koordinator's manual: mkdir, copy
// cpuset.cpus and cpuset.mems from the parent, echo the pids). The loop writes only to the listed
// cgroups, never creates or removes one, and never touches a parent: on cgroup v1 a child's cpus must be a
// subset of its parent's, so the loop writes the pool's CPUs that the parent has (none is an error it
// reports). One exception: an empty cpuset.mems, which keeps any task from joining, is set to the parent's
// memory nodes and left so.
//
// A listed cgroup that does not exist is logged once, looked for again at every pass (Config.Interval)
// and treated when it appears. Each value is recorded before the loop first writes it and written back
// when the application leaves the list, changes class or path, and when Run's context ends; a cpuset the
// kernel no longer accepts back (the parent narrowed meanwhile) gets the parent's CPUs.
package hostapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"k8s.io/klog/v2"
	kcpuset "k8s.io/utils/cpuset"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
)

// Cgroup drivers, as kubelet's cgroupDriver names them.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// Config is what the loop needs besides the application list.
type Config struct {
	// CgroupDriver is kubelet's: cgroupfs or systemd. It decides where the Kubepods bases are.
	CgroupDriver string `json:"cgroupDriver"`
	// KubeletCgroupRoot is kubelet's cgroupRoot ("/" by default): the Kubepods bases are below it with the
	// cgroupfs driver. The CgroupRoot base is the hierarchy's root whatever it says, as in Koordinator.
	KubeletCgroupRoot string `json:"kubeletCgroupRoot"`
	// Interval is how often every listed cgroup is checked and brought back to its treatment: pool
	// changes, suppression and cgroups that appear are picked up within it.
	Interval time.Duration `json:"interval"`
}

// DefaultConfig is kubelet's defaults (cgroupfs, cgroup root /) and a pass every 2 s.
func DefaultConfig() Config {
	return Config{CgroupDriver: DriverCgroupfs, KubeletCgroupRoot: "/", Interval: 2 * time.Second}
}

// Validate checks the configuration on its own.
func (c Config) Validate() error {
	var errs []error
	if c.CgroupDriver != DriverCgroupfs && c.CgroupDriver != DriverSystemd {
		errs = append(errs, fmt.Errorf("hostapp: cgroup driver %q, want cgroupfs or systemd", c.CgroupDriver))
	}
	if c.Interval <= 0 {
		errs = append(errs, fmt.Errorf("hostapp: interval %s, want a positive duration", c.Interval))
	}
	return errors.Join(errs...)
}

// CgroupPath is the application's cgroup as a path from the hierarchy's root ("/host-latency-sensitive/nginx"),
// the form cgroup.Writer takes: ${base}/${parentDir}/${relativePath}, where base is, by driver:
//
//	base                cgroupfs                         systemd
//	CgroupRoot          /                                /
//	Kubepods            <kubeletRoot>/kubepods           /kubepods.slice
//	KubepodsBurstable   <kubeletRoot>/kubepods/burstable /kubepods.slice/kubepods-burstable.slice
//	KubepodsBesteffort  <kubeletRoot>/kubepods/besteffort /kubepods.slice/kubepods-besteffort.slice
//
// Under systemd a kubelet cgroupRoot other than / is refused: kubelet then names its slices after it, and
// nothing here knows those names.
func CgroupPath(cfg Config, app slo.HostApplication) (string, error) {
	// config/slo refuses these already; checked again because the path is joined (and cleaned) below.
	raw := app.Name
	if c := app.CgroupPath; c != nil {
		raw = c.ParentDir + "/" + c.RelativePath
	}
	if strings.Contains("/"+raw+"/", "/../") {
		return "", fmt.Errorf("application %q: cgroup path %q climbs out of its base", app.Name, raw)
	}
	base, rel := app.Cgroup()
	var dir string
	switch cfg.CgroupDriver {
	case DriverSystemd:
		if base != slo.CgroupBaseRoot && path.Clean("/"+cfg.KubeletCgroupRoot) != "/" {
			return "", fmt.Errorf("application %q: base %s under the systemd driver with kubelet cgroupRoot %s is not supported; use base CgroupRoot with the full path",
				app.Name, base, cfg.KubeletCgroupRoot)
		}
		dir = map[slo.CgroupBase]string{
			slo.CgroupBaseRoot:               "/",
			slo.CgroupBaseKubepods:           "/kubepods.slice",
			slo.CgroupBaseKubepodsBurstable:  "/kubepods.slice/kubepods-burstable.slice",
			slo.CgroupBaseKubepodsBesteffort: "/kubepods.slice/kubepods-besteffort.slice",
		}[base]
	default:
		kubepods := path.Join("/", cfg.KubeletCgroupRoot, "kubepods")
		dir = map[slo.CgroupBase]string{
			slo.CgroupBaseRoot:               "/",
			slo.CgroupBaseKubepods:           kubepods,
			slo.CgroupBaseKubepodsBurstable:  kubepods + "/burstable",
			slo.CgroupBaseKubepodsBesteffort: kubepods + "/besteffort",
		}[base]
	}
	if dir == "" {
		return "", fmt.Errorf("application %q: unknown cgroup base %q; use CgroupRoot, Kubepods, KubepodsBurstable or KubepodsBesteffort", app.Name, base)
	}
	p := path.Join(dir, rel)
	if p == dir {
		return "", fmt.Errorf("application %q: the cgroup path is its base %s itself; set cgroupPath.relativePath", app.Name, dir)
	}
	return p, nil
}

// Pools is the part of the cpuset allocator the loop reads.
type Pools interface{ Pools() alloc.Pools }

// Deps are the loop's collaborators.
type Deps struct {
	// Cgroups writes the applications' cgroups; it must also be a cgroup.Tree (cgroup.New's writers are).
	Cgroups cgroup.Writer
	// CPUs gives the pools; nil (no CPU topology) leaves cpusets alone.
	CPUs Pools
	// BEQuotaCeiling is the CFS limit CPU suppression puts on BE pods now (cfsQuota policy); ok is false
	// while there is none. Nil: none ever.
	BEQuotaCeiling func() (cgroup.CPUMax, bool)
	// Kick makes the loop pass at once (the pools changed); optional.
	Kick <-chan struct{}
}

// Loop applies the treatment. Set and Knobs and Targets are safe for concurrent use with Run.
type Loop struct {
	cfg  Config
	deps Deps
	tree cgroup.Tree
	wake chan struct{}

	mu      sync.Mutex
	wants   []want
	targets []collector.Target
	status  []knob.Status

	// state is Run's alone: what the loop found and changed, by application.
	state map[string]*appState
}

// want is one listed application as the loop will treat it.
type want struct {
	app    slo.HostApplication
	cgroup string
	err    error // the path cannot be mapped, or another application has it
}

// appState is what the loop knows of one application's cgroup between passes.
type appState struct {
	name   string
	class  qos.Class
	cgroup string
	// found holds each file's value before the loop first wrote it.
	found map[string]string
	// missing is set while the cgroup is absent from every controller the loop uses (logged once).
	missing bool
	// lastErr keeps a failure that repeats every pass to one log line.
	lastErr string
}

// New returns a loop with no application; Set gives it the list and Run applies it.
func New(cfg Config, deps Deps) (*Loop, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Cgroups == nil {
		return nil, errors.New("hostapp: no cgroup hierarchy to treat host applications in")
	}
	tree, ok := deps.Cgroups.(cgroup.Tree)
	if !ok {
		return nil, errors.New("hostapp: the cgroup writer cannot read cgroups (not a cgroup.Tree)")
	}
	if deps.BEQuotaCeiling == nil {
		deps.BEQuotaCeiling = func() (cgroup.CPUMax, bool) { return cgroup.CPUMax{}, false }
	}
	return &Loop{cfg: cfg, deps: deps, tree: tree, wake: make(chan struct{}, 1), state: map[string]*appState{}}, nil
}

// Set hands the loop the applications listed for this node (slo.Resolved.HostApplications); it does not
// block: the loop applies them at once, in Run.
func (l *Loop) Set(apps []slo.HostApplication) {
	wants := make([]want, 0, len(apps))
	owner := map[string]string{}
	var targets []collector.Target
	for _, a := range apps {
		w := want{app: a}
		w.cgroup, w.err = CgroupPath(l.cfg, a)
		if w.err == nil {
			if prev, taken := owner[w.cgroup]; taken {
				w.err = fmt.Errorf("application %q: cgroup %s is also application %q's; give each its own cgroup", a.Name, w.cgroup, prev)
			} else {
				owner[w.cgroup] = a.Name
				targets = append(targets, collector.Target{Container: a.Name, ContainerID: TargetID(a.Name), QoS: a.QoS, Cgroup: w.cgroup})
			}
		}
		wants = append(wants, w)
	}
	l.mu.Lock()
	l.wants, l.targets = wants, targets
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// TargetID is the collector key of a host application: no container ID has a slash.
func TargetID(name string) string { return "host-application/" + name }

// Targets are the listed applications' cgroups for the collector (collector.Collector.AddTargets); the
// slice is shared and must not be changed.
func (l *Loop) Targets() []collector.Target {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.targets
}

// Knobs reports host-application-config: one key per application, applications[<name>].
func (l *Loop) Knobs() []knob.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]knob.Status(nil), l.status...)
}

// Run passes over the applications every Config.Interval, on Set and on Kick, until ctx ends; what it
// changed stays until Restore.
func (l *Loop) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	logger.Info("Host application loop running", "cgroupDriver", l.cfg.CgroupDriver, "interval", l.cfg.Interval)
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		l.pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-l.wake:
		case <-l.deps.Kick:
		}
	}
}

// Restore writes back what the loop changed in the applications' cgroups, as the agent stops.
func (l *Loop) Restore(ctx context.Context) error {
	l.restoreAll(ctx)
	return nil
}

func stateKey(w want) string { return w.app.Name + "\x00" + string(w.app.QoS) + "\x00" + w.cgroup }

// pass restores what left the list and applies the rest.
func (l *Loop) pass(ctx context.Context) {
	l.mu.Lock()
	wants := l.wants
	l.mu.Unlock()
	keep := map[string]bool{}
	for _, w := range wants {
		if w.err == nil {
			keep[stateKey(w)] = true
		}
	}
	for k, s := range l.state {
		if !keep[k] {
			l.restore(ctx, s)
			delete(l.state, k)
		}
	}
	var pools *alloc.Pools
	if l.deps.CPUs != nil {
		p := l.deps.CPUs.Pools()
		pools = &p
	}
	ceiling, capped := l.deps.BEQuotaCeiling()
	if !capped {
		ceiling = cgroup.CPUMax{Quota: -1}
	}
	status := make([]knob.Status, 0, max(len(wants), 1))
	for _, w := range wants {
		value, _ := json.Marshal(w.app)
		st := knob.Status{Section: slo.HostApplicationConfigKey, Key: "applications[" + w.app.Name + "]", Value: string(value)}
		if w.err != nil {
			st.State, st.Detail = knob.Refused, w.err.Error()
		} else {
			s := l.state[stateKey(w)]
			if s == nil {
				s = &appState{name: w.app.Name, class: w.app.QoS, cgroup: w.cgroup, found: map[string]string{}}
				l.state[stateKey(w)] = s
			}
			st.State, st.Detail = l.apply(ctx, s, pools, ceiling)
		}
		status = append(status, st)
	}
	if len(wants) == 0 {
		status = append(status, knob.Status{Section: slo.HostApplicationConfigKey, Key: "applications", Value: "[]",
			State: knob.Off, Detail: "no host application is listed for this node"})
	}
	l.mu.Lock()
	l.status = status
	l.mu.Unlock()
}

// apply brings one application's cgroup to its class's treatment and says how it went.
func (l *Loop) apply(ctx context.Context, s *appState, pools *alloc.Pools, ceiling cgroup.CPUMax) (knob.State, string) {
	logger := klog.FromContext(ctx).WithValues("application", s.name, "qos", s.class, "cgroup", s.cgroup)
	var done, missing []string
	var errs []error
	note := func(part string, err error) {
		switch {
		case err == nil:
			done = append(done, part)
		case errdefs.IsNotFound(err):
			missing = append(missing, part)
		case errors.Is(err, fs.ErrNotExist):
			// The cgroup is there without the file: a controller not enabled for it (v2), an old kernel.
			done = append(done, "not "+part+": "+err.Error())
		default:
			errs = append(errs, err)
		}
	}
	if pools != nil {
		pool, name := pools.LS, "LS"
		if s.class == qos.BE {
			pool, name = pools.BE, "BE"
		}
		cpus, err := l.applyCPUSet(s, pool)
		note(fmt.Sprintf("cpuset.cpus %s (the %s pool%s)", cpus, name, narrowed(cpus, pool)), err)
	}
	if s.class == qos.BE {
		note("cpu.idle 1", l.applyFile(s, "cpu.idle", "1"))
		quota, err := l.applyQuota(s, ceiling)
		if !ceiling.Unlimited() || err != nil {
			note(fmt.Sprintf("CFS quota %d (BE suppression ceiling %d/%d)", quota, ceiling.Quota, ceiling.Period), err)
		}
	}
	if len(done)+len(missing)+len(errs) == 0 {
		return knob.Ignored, "no CPU topology on this node: the CPU pools are unknown, so there is nothing to apply to an LS application"
	}
	// The cgroup is missing when nothing could be done for lack of it.
	gone := len(done) == 0 && len(errs) == 0 && len(missing) > 0
	if gone != s.missing {
		if gone {
			logger.Info("Host application cgroup does not exist; looking for it at every pass", "every", l.cfg.Interval)
		} else {
			logger.Info("Host application cgroup found")
		}
		s.missing = gone
	}
	if err := errors.Join(errs...); err != nil {
		if msg := err.Error(); msg != s.lastErr {
			logger.Error(err, "Host application not fully treated; retrying at every pass")
			s.lastErr = msg
		}
		return knob.Refused, fmt.Sprintf("cgroup %s: %v", s.cgroup, err)
	}
	if s.lastErr != "" {
		logger.Info("Host application treated again")
		s.lastErr = ""
	}
	if gone {
		return knob.Ignored, fmt.Sprintf("cgroup %s does not exist (%s); retried every %s", s.cgroup, strings.Join(missing, ", "), l.cfg.Interval)
	}
	detail := fmt.Sprintf("cgroup %s: %s", s.cgroup, strings.Join(done, "; "))
	if len(missing) > 0 {
		detail += fmt.Sprintf("; not in every controller, retried every %s: %s", l.cfg.Interval, strings.Join(missing, ", "))
	}
	return knob.Applied, detail
}

func narrowed(got, pool kcpuset.CPUSet) string {
	if got.Equals(pool) {
		return ""
	}
	return fmt.Sprintf(" %s, within the parent's CPUs", pool)
}

// effective names the files holding what a cgroup may really use, by hierarchy version.
func (l *Loop) effective() (cpus, mems string) {
	if l.deps.Cgroups.Version() == 2 {
		return "cpuset.cpus.effective", "cpuset.mems.effective"
	}
	return "cpuset.effective_cpus", "cpuset.effective_mems"
}

// applyCPUSet writes the pool's CPUs that the parent has; it returns what the cgroup gets.
func (l *Loop) applyCPUSet(s *appState, pool kcpuset.CPUSet) (kcpuset.CPUSet, error) {
	cur, err := l.tree.ReadFile(s.cgroup, "cpuset.cpus")
	if err != nil {
		return pool, err
	}
	effCPUs, effMems := l.effective()
	parent := path.Dir(s.cgroup)
	want := pool
	if v, err := l.tree.ReadFile(parent, effCPUs); err == nil {
		if p, err := kcpuset.Parse(v); err == nil {
			want = pool.Intersection(p)
		}
	}
	if want.IsEmpty() {
		return want, fmt.Errorf("the pool %s and the CPUs of the parent cgroup %s share none; widen the parent", pool, parent)
	}
	// cgroup v1 lets no task join a cpuset with no memory node: give it the parent's, once.
	if mems, err := l.tree.ReadFile(s.cgroup, "cpuset.mems"); err == nil && mems == "" {
		if pm, err := l.tree.ReadFile(parent, effMems); err == nil && pm != "" {
			if err := l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{CpusetMems: &pm}); err != nil {
				return want, fmt.Errorf("cpuset.mems is empty and the parent's %s could not be written: %w", pm, err)
			}
		}
	}
	if got, err := kcpuset.Parse(cur); err == nil && got.Equals(want) {
		if _, ok := s.found["cpuset.cpus"]; !ok {
			s.found["cpuset.cpus"] = cur
		}
		return want, nil
	}
	if _, ok := s.found["cpuset.cpus"]; !ok {
		s.found["cpuset.cpus"] = cur
	}
	v := want.String()
	if err := l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{CpusetCpus: &v}); err != nil {
		return want, fmt.Errorf("cpuset.cpus %s: %w", v, err)
	}
	return want, nil
}

// applyFile writes value into one file of the cgroup unless it holds it already.
func (l *Loop) applyFile(s *appState, file, value string) error {
	cur, err := l.tree.ReadFile(s.cgroup, file)
	if err != nil {
		return err
	}
	if _, ok := s.found[file]; !ok {
		s.found[file] = cur
	}
	if cur == value {
		return nil
	}
	if err := l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{Files: map[string]string{file: value}}); err != nil {
		return fmt.Errorf("%s %s: %w", file, value, err)
	}
	return nil
}

// quotaKey records the CFS limit found, as "<quota> <period>".
const quotaKey = "cfs"

// applyQuota keeps the cgroup's CFS quota at the lower of what the operator gave it and the ceiling.
func (l *Loop) applyQuota(s *appState, ceiling cgroup.CPUMax) (int64, error) {
	cur, err := l.tree.CPUMax(s.cgroup)
	if err != nil {
		return 0, err
	}
	if _, ok := s.found[quotaKey]; !ok {
		if ceiling.Unlimited() {
			return cur.Quota, nil // nothing to do: record nothing, so nothing is written back
		}
		s.found[quotaKey] = fmt.Sprintf("%d %d", cur.Quota, cur.Period)
	}
	orig := parseMax(s.found[quotaKey])
	want := orig.Quota
	if orig.Period != cur.Period && !orig.Unlimited() {
		want = cgroup.Scale(orig.Quota, cur.Period, orig.Period)
	}
	if c := ceiling.Under(cur.Period); c >= 0 && (want < 0 || want > c) {
		want = c
	}
	if cur.Quota == want || (want < 0 && cur.Unlimited()) {
		return want, nil
	}
	period := cur.Period
	if err := l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{CPUQuota: &want, CPUPeriod: &period}); err != nil {
		return want, fmt.Errorf("CFS quota %d/%d: %w", want, period, err)
	}
	return want, nil
}

func parseMax(v string) cgroup.CPUMax {
	q, p, _ := strings.Cut(v, " ")
	m := cgroup.CPUMax{Quota: -1}
	m.Quota, _ = strconv.ParseInt(q, 10, 64)
	m.Period, _ = strconv.ParseInt(p, 10, 64)
	return m
}

// restore writes back what the loop found in one application's cgroup.
func (l *Loop) restore(ctx context.Context, s *appState) {
	logger := klog.FromContext(ctx).WithValues("application", s.name, "cgroup", s.cgroup)
	var errs []error
	keys := make([]string, 0, len(s.found))
	for k := range s.found {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := s.found[k]
		var err error
		switch k {
		case "cpuset.cpus":
			if err = l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{CpusetCpus: &v}); err != nil && !errdefs.IsNotFound(err) {
				// The parent narrowed meanwhile: what it has is the widest the kernel accepts.
				effCPUs, _ := l.effective()
				if p, perr := l.tree.ReadFile(path.Dir(s.cgroup), effCPUs); perr == nil {
					err = l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{CpusetCpus: &p})
				}
			}
		case quotaKey:
			m := parseMax(v)
			err = l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{CPUQuota: &m.Quota, CPUPeriod: &m.Period})
		default:
			err = l.deps.Cgroups.Write(s.cgroup, cgroup.Settings{Files: map[string]string{k: v}})
		}
		if err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		logger.Error(err, "Host application cgroup not fully restored")
		return
	}
	if len(keys) > 0 {
		logger.Info("Host application cgroup restored")
	}
}

// restoreAll writes back every application's values: the loop is stopping.
func (l *Loop) restoreAll(ctx context.Context) {
	for k, s := range l.state {
		l.restore(ctx, s)
		delete(l.state, k)
	}
}
