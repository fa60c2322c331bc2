// Package loadaware is TandemLoadAware, a kube-scheduler framework plugin that places pods by the
// load and batch capacity Tandem's node agents publish. It decides with tandem-extender's rules
// and policy (scheduler-extender.Decider), from kube-scheduler's own informers, inside
// kube-scheduler's scheduling cycle: no HTTPS round trip per pod, no second watch of every Node
// and Pod. bench/scale measured the extender's two round trips per pod as what costs Tandem most
// of kube-scheduler's throughput (docs/scale.md); tandem-extender stays for clusters that cannot
// replace their kube-scheduler binary.
//
// Like tandem-extender, it honours Koordinator Reservations (scheduling.koordinator.sh/v1alpha1,
// made by tandem-descheduler): reserved batch room is kept from other pods and an owner goes to
// its reserved node. They are read through a dynamic client from kube-scheduler's kubeconfig, by
// an informer of the plugin's own; without the CRD, or without RBAC for kube-scheduler's user to
// read them, the plugin logs so once and runs without.
package loadaware

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"sigs.k8s.io/yaml"

	extender "github.com/tandemkit/tandem/scheduler-extender"
)

// Name is the plugin's name in a KubeSchedulerConfiguration's profiles and pluginConfig.
const Name = "TandemLoadAware"

// stateKey is where PreFilter leaves the pod's demand for Filter and Score in the cycle.
const stateKey fwk.StateKey = Name

// LoadAware is the plugin.
type LoadAware struct {
	decider *extender.Decider
}

var (
	_ fwk.PreFilterPlugin = (*LoadAware)(nil)
	_ fwk.FilterPlugin    = (*LoadAware)(nil)
	_ fwk.ScorePlugin     = (*LoadAware)(nil)
)

// New is the plugin's factory, for app.WithPlugin(Name, New). Its arguments are the extender's
// policy (docs/extender.md), under pluginConfig's args.
func New(ctx context.Context, args runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	cfg, err := DecodeArgs(args)
	if err != nil {
		return nil, err
	}
	var opts []extender.CacheOption
	if kc := h.KubeConfig(); kc != nil {
		dyn, err := dynamic.NewForConfig(kc)
		if err != nil {
			return nil, fmt.Errorf("%s: build a dynamic client for reservations from kube-scheduler's kubeconfig: %w", Name, err)
		}
		opts = append(opts, extender.WithReservations(dyn))
	}
	f := h.SharedInformerFactory()
	return newLoadAware(ctx, cfg, f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer(), opts...)
}

// newLoadAware registers on the informers, which kube-scheduler starts after building its
// plugins; until their initial lists are in, PreFilter sends pods back to be retried. A
// reservations informer (opts) is the cache's own and starts at once.
func newLoadAware(ctx context.Context, cfg extender.Config, nodes, pods cache.SharedInformer, opts ...extender.CacheOption) (*LoadAware, error) {
	c, err := extender.NewNodeCacheOn(ctx, cfg, nodes, pods, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return &LoadAware{decider: extender.NewDecider(cfg, c)}, nil
}

// DecodeArgs reads the plugin's args: the extender's policy keys, each defaulting as in
// tandem-extender. Unknown keys are refused, so a typo does not silently leave a default in force.
func DecodeArgs(args runtime.Object) (extender.Config, error) {
	cfg := extender.DefaultConfig()
	var raw []byte
	switch a := args.(type) {
	case nil:
	case *runtime.Unknown:
		raw = a.Raw
	default:
		return cfg, fmt.Errorf("%s: args of type %T: want the extender's policy keys (docs/extender.md) under pluginConfig args", Name, args)
	}
	if len(raw) > 0 {
		if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
			return cfg, fmt.Errorf("%s: pluginConfig args: %w; the keys are the extender's policy keys (docs/extender.md)", Name, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: pluginConfig args: %w", Name, err)
	}
	return cfg, nil
}

// Name implements fwk.Plugin.
func (p *LoadAware) Name() string { return Name }

type podState struct{ demand extender.Demand }

// Clone shares the state: nothing changes it after PreFilter.
func (s *podState) Clone() fwk.StateData { return s }

// errNotSynced sends a pod back to the queue with backoff while the caches fill at start.
var errNotSynced = errors.New("tandem: node and pod caches have not synced yet; the pod is retried")

// PreFilter works out once per pod what Filter and Score ask of every node.
func (p *LoadAware) PreFilter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !p.decider.Ready() {
		return nil, fwk.AsStatus(errNotSynced)
	}
	state.Write(stateKey, &podState{demand: p.decider.DemandOf(pod)})
	return nil, nil
}

// PreFilterExtensions implements fwk.PreFilterPlugin: the demand does not depend on other pods.
func (p *LoadAware) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func (p *LoadAware) demand(state fwk.CycleState, pod *corev1.Pod) extender.Demand {
	if s, err := state.Read(stateKey); err == nil {
		if ps, ok := s.(*podState); ok {
			return ps.demand
		}
	}
	return p.decider.DemandOf(pod)
}

// Filter rejects a node as tandem-extender's filter would: for its load, its metric's age, its
// free batch capacity, or reservations (room held for other pods; for an owner, every node but
// its reserved one). Only batch capacity can be freed by preemption, so only those rejections
// are resolvable.
func (p *LoadAware) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	node := ni.Node()
	if node == nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "tandem: node not found")
	}
	dem := p.demand(state, pod)
	rej := p.decider.Filter(dem, node.Name)
	if rej == nil {
		return nil
	}
	if v := klog.FromContext(ctx).V(5); v.Enabled() {
		v.Info("Rejected node", "pod", klog.KObj(pod), "node", node.Name, "reason", rej.Reason, "detail", p.decider.Explain(dem, node.Name, rej.Reason))
	}
	if rej.Resolvable {
		return fwk.NewStatus(fwk.Unschedulable, rej.Message)
	}
	return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, rej.Message)
}

// Score is tandem-extender's prioritize score, scaled from 0-10 to 0-100 as kube-scheduler scales
// an extender's, so the same weight gives the same placements.
func (p *LoadAware) Score(_ context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	node := ni.Node()
	if node == nil {
		return 0, nil
	}
	return p.decider.Score(p.demand(state, pod), node.Name) * (fwk.MaxScore / extenderv1.MaxExtenderPriority), nil
}

// ScoreExtensions implements fwk.ScorePlugin: scores are already within 0-100.
func (p *LoadAware) ScoreExtensions() fwk.ScoreExtensions { return nil }
