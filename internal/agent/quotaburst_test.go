package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/quotaburst"
	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/resource/cgroup"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/store"
)

// storeFrontEnd is a front end that is only its store.
type storeFrontEnd struct{ st *store.Store }

func (f storeFrontEnd) Store() *store.Store           { return f.st }
func (f storeFrontEnd) Refresh(context.Context) error { return nil }
func (f storeFrontEnd) Ready(context.Context) error   { return nil }

func TestBurstContainers(t *testing.T) {
	t.Parallel()
	st := store.New()
	st.PutPod(&store.Pod{ID: "p1", Name: "web", Namespace: "ns", CgroupParent: "/kubepods/burstable/pod1",
		Annotations: map[string]string{qos.AnnotationClass: "LS"}})
	st.PutContainer(&store.Container{ID: "c1", PodSandboxID: "p1", Name: "app", State: "CONTAINER_RUNNING",
		Resources: &hooks.Resources{CPUQuota: 20000, CPUPeriod: 100000}})
	st.PutContainer(&store.Container{ID: "c2", PodSandboxID: "p1", Name: "side", State: "CONTAINER_CREATED",
		Annotations: map[string]string{qos.AnnotationClass: "BE"}})
	st.PutContainer(&store.Container{ID: "orphan", PodSandboxID: "gone", Name: "x", State: "CONTAINER_RUNNING"})
	list := burstContainers(st, false)
	want := []quotaburst.Container{
		{ID: "c1", Name: "app", PodID: "p1", Namespace: "ns", Pod: "web", Class: resqos.LS, PodCgroupParent: "/kubepods/burstable/pod1", Quota: 20000, Period: 100000, Running: true},
		{ID: "c2", Name: "side", PodID: "p1", Namespace: "ns", Pod: "web", Class: resqos.BE, PodCgroupParent: "/kubepods/burstable/pod1"},
	}
	if got := list(); !slices.Equal(got, want) {
		t.Fatalf("containers = %+v, want %+v", got, want)
	}
	// A resize through the proxy: the new quota is what the loop sees next.
	st.UpdateContainer("c1", func(c *store.Container) { c.Resources.CPUQuota = 30000 })
	if got := list(); got[0].Quota != 30000 {
		t.Fatalf("after an update: quota %d, want 30000", got[0].Quota)
	}
}

// TestQuotaBurstFollowsSLO: the loop is started as run() starts it, follows cpu-burst-config and reports
// its keys; without a cgroup hierarchy the keys say it is ignored. The loop's decisions and writes are
// actuate/quotaburst's tests; the real node is e2e/quotaburst_test.go's.
func TestQuotaBurstFollowsSLO(t *testing.T) {
	t.Parallel()
	// A fake cgroup v1 tree with the burst file: cgroup files cannot be made outside the kernel's hierarchy.
	root := t.TempDir()
	for _, f := range []string{"cpu/cpu.cfs_burst_us", "cpu/cpu.cfs_quota_us", "cpuacct/cpuacct.usage"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := cgroup.New(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		cgroups cgroup.Writer
		want    map[string]map[slo.CPUBurstPolicy]knob.State // key → policy → state
	}{
		{name: "with cgroups", cgroups: w, want: map[string]map[slo.CPUBurstPolicy]knob.State{
			"cpuBurstPercent":      {slo.CPUBurstNone: knob.Off, slo.CPUBurstAuto: knob.Applied, slo.CFSQuotaBurstOnly: knob.Off},
			"cfsQuotaBurstPercent": {slo.CPUBurstNone: knob.Off, slo.CPUBurstAuto: knob.Applied, slo.CFSQuotaBurstOnly: knob.Applied},
		}},
		{name: "without cgroups", want: map[string]map[slo.CPUBurstPolicy]knob.State{
			"cpuBurstPercent":      {slo.CPUBurstNone: knob.Off, slo.CPUBurstAuto: knob.Ignored, slo.CFSQuotaBurstOnly: knob.Off},
			"cfsQuotaBurstPercent": {slo.CPUBurstNone: knob.Off, slo.CPUBurstAuto: knob.Ignored, slo.CFSQuotaBurstOnly: knob.Ignored},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			loops, err := supervise.New(ctx, nil, supervise.Backoff())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cancel(); loops.Wait() })
			col, err := collector.New(collector.DefaultConfig(), collector.Deps{ProcRoot: "/proc", CgroupRoot: root})
			if err != nil {
				t.Fatal(err)
			}
			st := settings{cgroupRoot: root, colocation: &atomic.Pointer[slo.Resolved]{}}
			def := resolve(t, nil)
			st.colocation.Store(&def)
			cons := &consumers{colocation: st.colocation, resolved: def, firstApplied: make(chan struct{})}
			n := &nodeParts{st: st, col: col, cgroups: tt.cgroups, fe: storeFrontEnd{store.New()}, reg: prometheus.NewRegistry()}
			c := n.quotaBurst(ctx)
			cons.add(ctx, c)
			c.Start(ctx, loops)
			reporter, ok := c.(knob.Reporter)
			if !ok {
				t.Fatalf("the CFS quota burst (%T) reports no keys", c)
			}
			for _, policy := range []slo.CPUBurstPolicy{slo.CPUBurstNone, slo.CPUBurstAuto, slo.CFSQuotaBurstOnly} {
				r := resolve(t, map[string]string{slo.CPUBurstConfigKey: `{"clusterStrategy": {"policy": "` + string(policy) + `", "cfsQuotaBurstPercent": 400}}`})
				cons.apply(ctx, source.Update{Resolved: r, Origin: "test"})
				err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
					k := burstKnobs(reporter)
					for key, states := range tt.want {
						if k[key].State != states[policy] {
							return false, nil
						}
					}
					return k["policy"].Value == `"`+string(policy)+`"` && k["cfsQuotaBurstPercent"].Value == "400", nil
				})
				if err != nil {
					t.Fatalf("policy %s: knobs %+v, want %v", policy, burstKnobs(reporter), tt.want)
				}
			}
		})
	}
}

// burstKnobs indexes a reporter's keys.
func burstKnobs(r knob.Reporter) map[string]knob.Status {
	out := map[string]knob.Status{}
	for _, s := range r.Knobs() {
		out[s.Key] = s
	}
	return out
}
