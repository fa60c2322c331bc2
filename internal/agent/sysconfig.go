package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/knob"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/kubeclient"
	"github.com/tandemkit/tandem/resource/sysconfig"
)

// sysconfigRecord is the file in the state directory that holds the values the node had before Tandem
// wrote system-config's (resource/sysconfig).
const sysconfigRecord = "sysconfig-originals.json"

// sysConfig applies system-config's node-wide settings (min_free_kbytes, watermark_scale_factor, and
// Anolis's memcg reaper and group identity switch) and follows every change; when the agent stops, it
// puts the node's own values back. It acts once first is closed (nil: at once). docs/system-config.md
// says what each key does.
func (n *nodeParts) sysConfig(ctx context.Context, first <-chan struct{}) (component, error) {
	cfg := sysconfig.Config{ProcRoot: "/proc", SysRoot: n.st.sysfsRoot, Record: filepath.Join(n.st.proxy.StateDir, sysconfigRecord)}
	return newSysConfig(ctx, cfg, first, n.reg)
}

// newSysConfig is sysConfig on the files cfg names. With a configuration source (first not nil), it
// waits for what the source says before touching the node: the defaults in force meanwhile leave
// system-config unset, and acting on them would put the originals back at every restart, only to write
// the operator's values again a moment later.
func newSysConfig(ctx context.Context, cfg sysconfig.Config, first <-chan struct{}, reg prometheus.Registerer) (component, error) {
	k, err := sysconfig.New(cfg)
	if err != nil {
		// Not fatal: the node keeps whatever it holds, and tandemctl config says why.
		klog.FromContext(ctx).Error(err, "system-config not applied")
		return switchedOff("system-config", func(slo.Resolved) []knob.Status { return sysconfigUnmanaged(err) }), nil
	}
	s, err := newSystemConfig(k, reg)
	if err != nil {
		return nil, err
	}
	return &loop{name: "system-config", knobs: s, restore: s.restore,
		configure: func(ctx context.Context, r slo.Resolved) error { s.set(ctx, r); return nil },
		run:       func(ctx context.Context) error { return s.run(ctx, first) }}, nil
}

// sloConfigExpected reports whether a slo-config will come: from the file, or from the ConfigMap when
// there is API access to read it (standalone without a file, Koordinator's defaults are all there is).
func sloConfigExpected(st settings) bool {
	if st.sloConfig != "" {
		return true
	}
	if st.sloConfigMap == "" {
		return false
	}
	_, err := kubeclient.Config(st.podSpec.Kubeconfig)
	return !errors.Is(err, kubeclient.ErrNoConfig)
}

// systemConfig is the loop that hands system-config to the keeper, and its knob reporter.
type systemConfig struct {
	keeper *sysconfig.Keeper
	kick   chan struct{}
	// value is what Tandem holds in each file it applied; state is 1 for each key's current state.
	value *prometheus.GaugeVec
	state *prometheus.GaugeVec

	mu   sync.Mutex
	want slo.SystemSettings
	// applied: the loop has applied a configuration (before that, Knobs says it waits).
	applied bool
}

func newSystemConfig(k *sysconfig.Keeper, reg prometheus.Registerer) (*systemConfig, error) {
	s := &systemConfig{keeper: k, kick: make(chan struct{}, 1),
		value: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tandem", Subsystem: "sysconfig", Name: "value",
			Help: "Value Tandem holds in a node-wide setting of system-config, by file; absent while Tandem leaves it to the kernel.",
		}, []string{"file"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "tandem", Subsystem: "sysconfig", Name: "state",
			Help: "1 for the state of each system-config key Tandem acts on (applied, off, ignored, refused).",
		}, []string{"key", "state"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.value, s.state} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register system-config metrics: %w", err)
			}
		}
	}
	return s, nil
}

// set is the follower: it stores the configuration and wakes the loop; it never blocks.
func (s *systemConfig) set(_ context.Context, r slo.Resolved) {
	s.mu.Lock()
	s.want = r.System
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run applies the configuration in force, after first is closed (nil: at once), and each change, until
// ctx ends.
func (s *systemConfig) run(ctx context.Context, first <-chan struct{}) error {
	if first != nil {
		select {
		case <-first:
		case <-ctx.Done():
			return nil
		}
	}
	var last *sysconfig.Want
	for {
		s.mu.Lock()
		want := wantOf(s.want)
		s.applied = true
		s.mu.Unlock()
		// Only a change of these values writes: another section's change must not overwrite a value
		// someone set by hand since (Knobs reports that).
		if last == nil || !sameWant(*last, want) {
			s.observe(s.keeper.Apply(ctx, want))
			last = &want
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		}
	}
}

// restore puts the node's own values back, a record left by a run that was killed included.
func (s *systemConfig) restore(ctx context.Context) error {
	defer s.observe(s.keeper.Results())
	if err := s.keeper.Restore(ctx); err != nil {
		return fmt.Errorf("system settings not all restored; the record keeps them for the next start: %w", err)
	}
	return nil
}

func (s *systemConfig) observe(rs []sysconfig.Result) {
	for _, r := range rs {
		for _, st := range []sysconfig.State{sysconfig.Applied, sysconfig.Off, sysconfig.Ignored, sysconfig.Refused} {
			v := 0.0
			if r.State == st {
				v = 1
			}
			s.state.WithLabelValues(r.Key, string(st)).Set(v)
		}
		if r.State == sysconfig.Applied {
			s.value.WithLabelValues(r.File).Set(float64(r.Value))
		} else {
			s.value.DeleteLabelValues(r.File)
		}
	}
}

// Knobs reports every key of system-config: the four Tandem applies, as the last Apply left them, and
// the others as unsupported.
func (s *systemConfig) Knobs() []knob.Status {
	s.mu.Lock()
	want, applied := s.want, s.applied
	s.mu.Unlock()
	results := map[string]sysconfig.Result{}
	if applied {
		for _, r := range s.keeper.Results() {
			results[r.Key] = r
		}
	}
	w := wantOf(want)
	configured := map[string]*int64{
		sysconfig.KeyMinFreeKbytesFactor:  w.MinFreeKbytesFactor,
		sysconfig.KeyWatermarkScaleFactor: w.WatermarkScaleFactor,
		sysconfig.KeyMemcgReapBackGround:  w.MemcgReapBackGround,
		sysconfig.KeySchedGroupIdentity:   w.SchedGroupIdentityEnabled,
	}
	var out []knob.Status
	for _, key := range sysconfig.Keys() {
		st := knob.Status{Section: slo.SystemConfigKey, Key: key}
		if r, ok := results[key]; ok {
			st.Value, st.State, st.Detail = jsonValue(r.Want), knob.State(r.State), r.Detail
		} else {
			st.Value, st.State, st.Detail = jsonValue(configured[key]), knob.Off, "not applied yet: waiting for the first slo-config"
		}
		out = append(out, st)
	}
	return append(out, sysconfigUnsupported(want)...)
}

// sysconfigUnsupported reports the keys of system-config Tandem accepts and does not act on.
func sysconfigUnsupported(want slo.SystemSettings) []knob.Status {
	var features, bandwidth string
	if len(want.SchedFeatures) > 0 {
		features = jsonValue(want.SchedFeatures)
	}
	if !want.TotalNetworkBandwidth.IsZero() {
		bandwidth = jsonValue(want.TotalNetworkBandwidth.String())
	}
	anolis := "Tandem does not act on it (an Anolis OS kernel feature koordlet writes)"
	out := []knob.Status{
		{Key: "pageCacheLimitEnabled", Value: jsonValue(want.PageCacheLimitEnabled), Detail: anolis},
		{Key: "schedFeatures", Value: features, Detail: "Tandem does not change the scheduler's features"},
		{Key: "schedIdleSaverWmark", Value: jsonValue(want.SchedIdleSaverWmark), Detail: anolis},
		{Key: "totalNetworkBandwidth", Value: bandwidth, Detail: "Tandem has no network QoS; the bandwidth is not used"},
	}
	for i := range out {
		out[i].Section, out[i].State = slo.SystemConfigKey, knob.Unsupported
	}
	return out
}

// sysconfigUnmanaged is every key's state when the record of original values cannot be read.
func sysconfigUnmanaged(err error) []knob.Status {
	var out []knob.Status
	for _, key := range sysconfig.Keys() {
		out = append(out, knob.Status{Section: slo.SystemConfigKey, Key: key, State: knob.Refused,
			Detail: "nothing written: " + err.Error()})
	}
	return append(out, sysconfigUnsupported(slo.SystemSettings{})...)
}

// wantOf maps system-config's strategy to what the keeper applies.
func wantOf(s slo.SystemSettings) sysconfig.Want {
	return sysconfig.Want{MinFreeKbytesFactor: s.MinFreeKbytesFactor, WatermarkScaleFactor: s.WatermarkScaleFactor,
		MemcgReapBackGround: s.MemcgReapBackGround, SchedGroupIdentityEnabled: s.SchedGroupIdentityEnabled}
}

func sameWant(a, b sysconfig.Want) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.MinFreeKbytesFactor, b.MinFreeKbytesFactor) && eq(a.WatermarkScaleFactor, b.WatermarkScaleFactor) &&
		eq(a.MemcgReapBackGround, b.MemcgReapBackGround) && eq(a.SchedGroupIdentityEnabled, b.SchedGroupIdentityEnabled)
}

// jsonValue is v as JSON, empty for a nil pointer.
func jsonValue[T any](v T) string {
	if p, ok := any(v).(*int64); ok && p == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
