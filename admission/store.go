package admission

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
)

// Profiles holds the compiled profiles the webhook applies, replaced whole at every change, so
// a review reads one consistent set without a lock.
type Profiles struct {
	current       atomic.Pointer[[]*Profile]
	count, broken prometheus.Gauge
}

// NewProfiles returns an empty set; its gauges go to reg.
func NewProfiles(reg prometheus.Registerer) *Profiles {
	s := &Profiles{
		count: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_webhook_profiles",
			Help: "ClusterColocationProfiles the webhook applies.",
		}),
		broken: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_webhook_profiles_invalid",
			Help: "ClusterColocationProfiles left out because they are invalid (each is logged); the webhook refuses such profiles, so they were stored while it was down.",
		}),
	}
	reg.MustRegister(s.count, s.broken)
	s.current.Store(&[]*Profile{})
	return s
}

// List returns the profiles in the order they apply. The caller must not change it.
func (s *Profiles) List() []*Profile { return *s.current.Load() }

// Update replaces the set with the profiles in objs, as a dynamic informer lists them. An
// invalid profile is logged and left out; the others still apply.
func (s *Profiles) Update(ctx context.Context, objs []*unstructured.Unstructured) {
	logger := klog.FromContext(ctx)
	out := make([]*Profile, 0, len(objs))
	broken := 0
	for _, u := range objs {
		p, err := fromUnstructured(u)
		if err == nil {
			var c *Profile
			if c, err = Compile(p); err == nil {
				out = append(out, c)
				continue
			}
		}
		broken++
		logger.Error(err, "ClusterColocationProfile left out until it is fixed", "profile", u.GetName())
	}
	out = Ordered(out)
	s.current.Store(&out)
	s.count.Set(float64(len(out)))
	s.broken.Set(float64(broken))
}

func fromUnstructured(u *unstructured.Unstructured) (*ClusterColocationProfile, error) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	var p ClusterColocationProfile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
