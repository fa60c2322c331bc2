package agent

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/tandemkit/tandem/actuate/dryrun"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/metrics/collector"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

type eventSink struct {
	mu      sync.Mutex
	reasons []string
}

func (s *eventSink) CreateEvent(_ context.Context, ev *corev1.Event) (*corev1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reasons = append(s.reasons, ev.Reason)
	return ev, nil
}

// TestDryRunFollowsSLO: dry-run-config reaches the suppress and evict loops as the agent builds them,
// at start and on reloads: under the pressure that makes them act, a dry run changes nothing and records
// what it would have done; switched off again, they act.
func TestDryRunFollowsSLO(t *testing.T) {
	t.Parallel()
	const gib = int64(1) << 30
	snap := &collector.Snapshot{Time: time.Now(),
		Capacity: collector.Usage{CPUMilli: 16000, MemoryBytes: 100 * gib},
		Node:     collector.Usage{CPUMilli: 15000, MemoryBytes: 95 * gib},
		System:   collector.Usage{CPUMilli: 1000},
		Containers: []collector.ContainerUsage{
			{Target: collector.Target{Namespace: "default", Pod: "ls", PodUID: "u-ls", Container: "c", QoS: "LS"}, Usage: collector.Usage{CPUMilli: 13000, MemoryBytes: 50 * gib}},
			{Target: collector.Target{Namespace: "default", Pod: "be", PodUID: "u-be", Container: "c", QoS: "BE"}, Usage: collector.Usage{CPUMilli: 1000, MemoryBytes: 20 * gib}},
		},
	}
	const thresholds = `{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 65, "memoryEvictThresholdPercent": 70}}`
	tests := []struct {
		name string
		// atStart is dry-run-config when the loops are built; reload the one a reload brings.
		atStart, reload string
		// wantEvents are the Event reasons after the reload's step.
		wantEvents []string
	}{
		{name: "both dry from the start", atStart: `{"suppress": true, "evict": true}`, reload: `{"suppress": true, "evict": true}`,
			wantEvents: []string{"WouldSuppress", "WouldEvict"}},
		{name: "switched on by a reload", atStart: `{}`, reload: `{"suppress": true, "evict": true}`,
			wantEvents: []string{"WouldSuppress", "WouldEvict"}},
		{name: "only eviction dry", atStart: `{"evict": true}`, reload: `{"evict": true}`, wantEvents: []string{"WouldEvict"}},
		{name: "only suppression dry", atStart: `{"suppress": true}`, reload: `{"suppress": true}`, wantEvents: []string{"WouldSuppress"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			topo, err := topology.Discover(filepath.Join("..", "..", "resource", "topology", "testdata", "16cpu-2socket-smt"))
			if err != nil {
				t.Fatal(err)
			}
			cpus, err := alloc.New(topo, alloc.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			withDry := func(dry string) slo.Resolved {
				return resolve(t, map[string]string{slo.ResourceThresholdConfigKey: thresholds, slo.DryRunConfigKey: dry})
			}
			start := withDry(tt.atStart)
			colocation := &atomic.Pointer[slo.Resolved]{}
			colocation.Store(&start)
			cons := &consumers{base: policy.DefaultConfig(), colocation: colocation, resolved: start}
			ev := &recordingEvictor{}
			col, err := collector.New(collector.DefaultConfig(), collector.Deps{ProcRoot: t.TempDir(), CgroupRoot: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := dryrun.New("node-a", nil)
			if err != nil {
				t.Fatal(err)
			}
			sink := &eventSink{}
			rec.SetSink(sink)
			n := &nodeParts{st: settings{colocation: colocation}, cpus: cpus, col: col, evictor: ev, fe: storeFrontEnd{store.New()},
				poolsChanged: func() {}, dry: rec}
			hr, err := n.headroom(ctx)
			if err != nil {
				t.Fatal(err)
			}
			lw, err := n.lsWaitGuard(ctx)
			if err != nil {
				t.Fatal(err)
			}
			comps := []component{hr, lw, n.suppress(ctx, cons)}
			evc, err := n.evict(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range append(comps, evc) {
				cons.add(ctx, c)
			}
			pool := cpus.Pools().BE.Size()
			reload := withDry(tt.reload)
			cons.apply(ctx, source.Update{Resolved: reload, Origin: "test"})
			if _, err := n.sup.Step(ctx, snap); err != nil {
				t.Fatal(err)
			}
			n.el.Step(ctx, snap)
			if got := cpus.Pools().BE.Size(); (got == pool) != reload.DryRun.Suppress {
				t.Errorf("BE pool %d CPUs of %d with suppress dry run %v", got, pool, reload.DryRun.Suppress)
			}
			if got := ev.count(); (got == 0) != reload.DryRun.Evict {
				t.Errorf("%d evictions with evict dry run %v", got, reload.DryRun.Evict)
			}
			if got := strings.Join(sink.reasons, ","); got != strings.Join(tt.wantEvents, ",") {
				t.Errorf("Events %s, want %s", got, strings.Join(tt.wantEvents, ","))
			}
			// Off again: both act.
			cons.apply(ctx, source.Update{Resolved: withDry(`{}`), Origin: "test"})
			if _, err := n.sup.Step(ctx, snap); err != nil {
				t.Fatal(err)
			}
			n.el.Step(ctx, snap)
			if got := cpus.Pools().BE.Size(); got == pool {
				t.Error("suppression did not act once dry run was switched off")
			}
			// A pod reported in dry run is no pod on its way out: evicted now, without a cool-down.
			if got := ev.count(); got != 1 {
				t.Errorf("%d evictions once dry run was switched off, want 1", got)
			}
		})
	}
}

// TestReconfigureKeepsDryRun: a configuration a loop refuses keeps the one in force, but not its dry-run
// switch, which comes from a section of its own.
func TestReconfigureKeepsDryRun(t *testing.T) {
	t.Parallel()
	type cfg struct {
		threshold int
		dry       bool
	}
	refuse := errors.New("refused")
	tests := []struct {
		name     string
		next     cfg
		refuseAt map[int]bool // thresholds the loop refuses
		want     cfg
		wantErr  bool
	}{
		{name: "accepted", next: cfg{80, true}, want: cfg{80, true}},
		{name: "refused: the one in force, switched dry", next: cfg{200, true}, refuseAt: map[int]bool{200: true}, want: cfg{70, true}, wantErr: true},
		{name: "refused: switched back live", next: cfg{200, false}, refuseAt: map[int]bool{200: true}, want: cfg{70, false}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var inForce cfg
			apply := func(c cfg) error {
				if tt.refuseAt[c.threshold] {
					return refuse
				}
				inForce = c
				return nil
			}
			last := cfg{70, !tt.next.dry}
			got, err := reconfigure(apply, tt.next, last, func(c *cfg) { c.dry = tt.next.dry })
			if (err != nil) != tt.wantErr || got != tt.want || inForce != tt.want {
				t.Errorf("reconfigure = %+v, %v, in force %+v; want %+v, error %v", got, err, inForce, tt.want, tt.wantErr)
			}
		})
	}
}
