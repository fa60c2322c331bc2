// Package config reads tandem-descheduler's configuration: koord-descheduler's
// DeschedulerConfiguration (descheduler/v1alpha2), of which Tandem reads deschedulingInterval, dryRun,
// leaderElection and, in the profiles, the arguments of the LowNodeLoad and MigrationController
// plugins. A Koordinator user's file therefore loads unchanged; the keys Tandem does not implement are
// reported as warnings, a key neither knows is an error naming it.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/descheduler/lowload"
)

// File is the DeschedulerConfiguration as written.
type File struct {
	APIVersion           string          `json:"apiVersion"`
	Kind                 string          `json:"kind"`
	DeschedulingInterval metav1.Duration `json:"deschedulingInterval"`
	DryRun               bool            `json:"dryRun"`
	LeaderElection       LeaderElection  `json:"leaderElection"`
	Profiles             []Profile       `json:"profiles"`
	// Accepted and not used by Tandem: the binary's flags set these.
	ClientConnection   json.RawMessage `json:"clientConnection,omitempty"`
	HealthzBindAddress *string         `json:"healthzBindAddress,omitempty"`
	MetricsBindAddress *string         `json:"metricsBindAddress,omitempty"`
	EnableProfiling    *bool           `json:"enableProfiling,omitempty"`
	NodeSelector       json.RawMessage `json:"nodeSelector,omitempty"`
	// koord-descheduler's limits of its own eviction path; Tandem's are MigrationController's.
	MaxNoOfPodsToEvictPerNode      *uint `json:"maxNoOfPodsToEvictPerNode,omitempty"`
	MaxNoOfPodsToEvictPerNamespace *uint `json:"maxNoOfPodsToEvictPerNamespace,omitempty"`
	MaxNoOfPodsToEvictTotal        *uint `json:"maxNoOfPodsToEvictTotal,omitempty"`
}

// LeaderElection is component-base's LeaderElectionConfiguration, the keys Tandem reads.
type LeaderElection struct {
	LeaderElect       *bool           `json:"leaderElect"`
	LeaseDuration     metav1.Duration `json:"leaseDuration"`
	RenewDeadline     metav1.Duration `json:"renewDeadline"`
	RetryPeriod       metav1.Duration `json:"retryPeriod"`
	ResourceLock      string          `json:"resourceLock"`
	ResourceName      string          `json:"resourceName"`
	ResourceNamespace string          `json:"resourceNamespace"`
}

// Profile is one descheduler profile.
type Profile struct {
	Name         string          `json:"name"`
	PluginConfig []PluginConfig  `json:"pluginConfig"`
	Plugins      json.RawMessage `json:"plugins,omitempty"`
	NodeSelector json.RawMessage `json:"nodeSelector,omitempty"`
}

// PluginConfig is one plugin's arguments, decoded by name.
type PluginConfig struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// Namespaces is koord-descheduler's include/exclude list.
type Namespaces struct {
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
}

// LowNodeLoadArgs are koord-descheduler's LowNodeLoad arguments.
type LowNodeLoadArgs struct {
	APIVersion                  string                   `json:"apiVersion,omitempty"`
	Kind                        string                   `json:"kind,omitempty"`
	Paused                      *bool                    `json:"paused,omitempty"`
	DryRun                      *bool                    `json:"dryRun,omitempty"`
	NumberOfNodes               *int32                   `json:"numberOfNodes,omitempty"`
	NodeMetricExpirationSeconds *int64                   `json:"nodeMetricExpirationSeconds,omitempty"`
	EvictableNamespaces         *Namespaces              `json:"evictableNamespaces,omitempty"`
	NodeSelector                *metav1.LabelSelector    `json:"nodeSelector,omitempty"`
	PodSelectors                []PodSelector            `json:"podSelectors,omitempty"`
	NodeFit                     *bool                    `json:"nodeFit,omitempty"`
	HighThresholds              lowload.Thresholds       `json:"highThresholds,omitempty"`
	LowThresholds               lowload.Thresholds       `json:"lowThresholds,omitempty"`
	ProdHighThresholds          lowload.Thresholds       `json:"prodHighThresholds,omitempty"`
	AnomalyCondition            *AnomalyCondition        `json:"anomalyCondition,omitempty"`
	UseDeviationThresholds      *bool                    `json:"useDeviationThresholds,omitempty"`
	ProdLowThresholds           lowload.Thresholds       `json:"prodLowThresholds,omitempty"`
	ResourceWeights             map[string]int64         `json:"resourceWeights,omitempty"`
	DetectorCacheTimeout        *metav1.Duration         `json:"detectorCacheTimeout,omitempty"`
	NodePools                   []map[string]interface{} `json:"nodePools,omitempty"`
}

// PodSelector is one named pod label selector.
type PodSelector struct {
	Name     string                `json:"name,omitempty"`
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// AnomalyCondition says how long a node must be abnormal to be hot.
type AnomalyCondition struct {
	Timeout                  *metav1.Duration `json:"timeout,omitempty"`
	ConsecutiveAbnormalities uint32           `json:"consecutiveAbnormalities,omitempty"`
	ConsecutiveNormalities   uint32           `json:"consecutiveNormalities,omitempty"`
}

// MigrationControllerArgs are koord-descheduler's MigrationController arguments, the keys Tandem reads
// and those it accepts without acting on.
type MigrationControllerArgs struct {
	APIVersion               string                `json:"apiVersion,omitempty"`
	Kind                     string                `json:"kind,omitempty"`
	DryRun                   bool                  `json:"dryRun,omitempty"`
	MaxMigratingGlobally     *int32                `json:"maxMigratingGlobally,omitempty"`
	MaxMigratingPerNode      *int32                `json:"maxMigratingPerNode,omitempty"`
	MaxMigratingPerNamespace *int32                `json:"maxMigratingPerNamespace,omitempty"`
	DefaultJobMode           string                `json:"defaultJobMode,omitempty"`
	DefaultJobTTL            *metav1.Duration      `json:"defaultJobTTL,omitempty"`
	Namespaces               *Namespaces           `json:"namespaces,omitempty"`
	LabelSelector            *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// Accepted, not acted on (see warnings).
	MaxConcurrentReconciles   *int32              `json:"maxConcurrentReconciles,omitempty"`
	EvictFailedBarePods       bool                `json:"evictFailedBarePods,omitempty"`
	EvictAllBarePods          bool                `json:"evictAllBarePods,omitempty"`
	EvictLocalStoragePods     bool                `json:"evictLocalStoragePods,omitempty"`
	EvictSystemCriticalPods   bool                `json:"evictSystemCriticalPods,omitempty"`
	IgnorePvcPods             bool                `json:"ignorePvcPods,omitempty"`
	NodeFit                   bool                `json:"nodeFit,omitempty"`
	MaxMigratingPerWorkload   *intstr.IntOrString `json:"maxMigratingPerWorkload,omitempty"`
	MaxUnavailablePerWorkload *intstr.IntOrString `json:"maxUnavailablePerWorkload,omitempty"`
	SkipCheckExpectedReplicas *bool               `json:"skipCheckExpectedReplicas,omitempty"`
	ObjectLimiters            json.RawMessage     `json:"objectLimiters,omitempty"`
	SchedulerNames            []string            `json:"schedulerNames,omitempty"`
	EvictQPS                  json.RawMessage     `json:"evictQPS,omitempty"`
	EvictBurst                *int32              `json:"evictBurst,omitempty"`
	EvictionPolicy            string              `json:"evictionPolicy,omitempty"`
	DefaultDeleteOptions      json.RawMessage     `json:"defaultDeleteOptions,omitempty"`
	ArbitrationArgs           json.RawMessage     `json:"arbitrationArgs,omitempty"`
	PriorityThreshold         json.RawMessage     `json:"priorityThreshold,omitempty"`
	SkipEvictionGates         json.RawMessage     `json:"skipEvictionGates,omitempty"`
}

// Config is the configuration resolved for the descheduler.
type Config struct {
	Interval time.Duration
	// DryRun: decide and report, never reserve or evict.
	DryRun bool
	// Paused: decide nothing.
	Paused  bool
	LowLoad lowload.Settings
	// The migration limits, 0 for none, and each job's lifetime.
	MaxMigratingGlobally, MaxMigratingPerNode, MaxMigratingPerNamespace int
	JobTTL                                                              time.Duration
	LeaderElect                                                         bool
	LeaseName, LeaseNamespace                                           string
	LeaseDuration, RenewDeadline, RetryPeriod                           time.Duration
}

// Default is what an empty file gives: koord-descheduler's LowNodeLoad defaults where it has them
// (nodeMetricExpirationSeconds 180, consecutiveAbnormalities 5) and Tandem's where it does not (high
// 70% and low 30% CPU; one job per node, two per namespace, five in the cluster; a 5-minute job TTL).
func Default() Config {
	return Config{
		Interval: 2 * time.Minute,
		LowLoad: lowload.Settings{
			HighThresholds: lowload.Thresholds{corev1.ResourceCPU: 70}, LowThresholds: lowload.Thresholds{corev1.ResourceCPU: 30},
			ConsecutiveAbnormalities: 5, MetricExpiration: 180 * time.Second, NodeFit: true,
		},
		MaxMigratingGlobally: 5, MaxMigratingPerNode: 1, MaxMigratingPerNamespace: 2, JobTTL: 5 * time.Minute,
		LeaderElect: true, LeaseName: "tandem-descheduler", LeaseNamespace: "koordinator-system",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
	}
}

// Parse reads a DeschedulerConfiguration (YAML or JSON) onto Default. warnings lists keys accepted and
// not acted on.
func Parse(raw []byte) (cfg Config, warnings []string, err error) {
	cfg = Default()
	var f File
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return cfg, nil, fmt.Errorf("descheduler configuration: not YAML: %w", err)
	}
	if err := strict(js, &f); err != nil {
		return cfg, nil, fmt.Errorf("descheduler configuration: %w", err)
	}
	if f.Kind != "" && f.Kind != "DeschedulerConfiguration" {
		return cfg, nil, fmt.Errorf("descheduler configuration: kind %q, want DeschedulerConfiguration", f.Kind)
	}
	if f.DeschedulingInterval.Duration > 0 {
		cfg.Interval = f.DeschedulingInterval.Duration
	}
	cfg.DryRun = f.DryRun
	le := f.LeaderElection
	if le.LeaderElect != nil {
		cfg.LeaderElect = *le.LeaderElect
	}
	for _, d := range []struct {
		v   metav1.Duration
		out *time.Duration
	}{{le.LeaseDuration, &cfg.LeaseDuration}, {le.RenewDeadline, &cfg.RenewDeadline}, {le.RetryPeriod, &cfg.RetryPeriod}} {
		if d.v.Duration > 0 {
			*d.out = d.v.Duration
		}
	}
	if le.ResourceName != "" {
		cfg.LeaseName = le.ResourceName
	}
	if le.ResourceNamespace != "" {
		cfg.LeaseNamespace = le.ResourceNamespace
	}
	if le.ResourceLock != "" && le.ResourceLock != "leases" {
		warnings = append(warnings, fmt.Sprintf("leaderElection.resourceLock %q: Tandem always uses a Lease", le.ResourceLock))
	}
	for _, w := range []struct {
		set  bool
		name string
	}{{f.MaxNoOfPodsToEvictPerNode != nil, "maxNoOfPodsToEvictPerNode"}, {f.MaxNoOfPodsToEvictPerNamespace != nil, "maxNoOfPodsToEvictPerNamespace"},
		{f.MaxNoOfPodsToEvictTotal != nil, "maxNoOfPodsToEvictTotal"}, {len(f.NodeSelector) > 0, "nodeSelector (use LowNodeLoad's)"}} {
		if w.set {
			warnings = append(warnings, w.name+": not read by Tandem; MigrationController's maxMigrating* limit moves")
		}
	}
	var errs []error
	for i, p := range f.Profiles {
		for j, pc := range p.PluginConfig {
			at := fmt.Sprintf("profiles[%d].pluginConfig[%d] (%s).args", i, j, pc.Name)
			var w []string
			var err error
			switch pc.Name {
			case "LowNodeLoad":
				w, err = lowNodeLoad(pc.Args, &cfg)
			case "MigrationController":
				w, err = migrationController(pc.Args, &cfg)
			default:
				w = []string{fmt.Sprintf("plugin %s: not implemented by Tandem; ignored", pc.Name)}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at, err))
			}
			for _, s := range w {
				warnings = append(warnings, at+": "+s)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, warnings, fmt.Errorf("descheduler configuration: %w", err)
	}
	return cfg, warnings, cfg.Validate()
}

func lowNodeLoad(raw json.RawMessage, cfg *Config) ([]string, error) {
	var a LowNodeLoadArgs
	if len(raw) > 0 {
		if err := strict(raw, &a); err != nil {
			return nil, err
		}
	}
	var warnings []string
	s := &cfg.LowLoad
	if a.Paused != nil {
		cfg.Paused = *a.Paused
	}
	if a.DryRun != nil && *a.DryRun {
		cfg.DryRun = true
	}
	if a.NumberOfNodes != nil {
		s.NumberOfNodes = int(*a.NumberOfNodes)
	}
	if a.NodeMetricExpirationSeconds != nil {
		s.MetricExpiration = time.Duration(*a.NodeMetricExpirationSeconds) * time.Second
	}
	if a.EvictableNamespaces != nil {
		s.Include = append(s.Include, a.EvictableNamespaces.Include...)
		s.Exclude = append(s.Exclude, a.EvictableNamespaces.Exclude...)
	}
	var errs []error
	if a.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(a.NodeSelector)
		if err != nil {
			errs = append(errs, fmt.Errorf("nodeSelector: %w", err))
		}
		s.NodeSelector = sel
	}
	for i, ps := range a.PodSelectors {
		sel, err := metav1.LabelSelectorAsSelector(ps.Selector)
		if err != nil {
			errs = append(errs, fmt.Errorf("podSelectors[%d]: %w", i, err))
			continue
		}
		s.PodSelectors = append(s.PodSelectors, sel)
	}
	if a.NodeFit != nil {
		s.NodeFit = *a.NodeFit
	}
	if a.HighThresholds != nil {
		s.HighThresholds = a.HighThresholds
	}
	if a.LowThresholds != nil {
		s.LowThresholds = a.LowThresholds
	}
	if a.ProdHighThresholds != nil {
		s.ProdHighThresholds = a.ProdHighThresholds
	}
	if c := a.AnomalyCondition; c != nil && c.ConsecutiveAbnormalities > 0 {
		s.ConsecutiveAbnormalities = int(c.ConsecutiveAbnormalities)
	}
	for _, w := range []struct {
		set  bool
		name string
	}{{a.UseDeviationThresholds != nil && *a.UseDeviationThresholds, "useDeviationThresholds"}, {a.ProdLowThresholds != nil, "prodLowThresholds"},
		{a.ResourceWeights != nil, "resourceWeights"}, {a.DetectorCacheTimeout != nil, "detectorCacheTimeout"}, {a.NodePools != nil, "nodePools"},
		{a.AnomalyCondition != nil && (a.AnomalyCondition.Timeout != nil || a.AnomalyCondition.ConsecutiveNormalities > 0), "anomalyCondition.timeout and consecutiveNormalities"}} {
		if w.set {
			warnings = append(warnings, w.name+": not implemented by Tandem; ignored")
		}
	}
	return warnings, errors.Join(errs...)
}

func migrationController(raw json.RawMessage, cfg *Config) ([]string, error) {
	var a MigrationControllerArgs
	if len(raw) > 0 {
		if err := strict(raw, &a); err != nil {
			return nil, err
		}
	}
	if a.DryRun {
		cfg.DryRun = true
	}
	for _, l := range []struct {
		v   *int32
		out *int
	}{{a.MaxMigratingGlobally, &cfg.MaxMigratingGlobally}, {a.MaxMigratingPerNode, &cfg.MaxMigratingPerNode}, {a.MaxMigratingPerNamespace, &cfg.MaxMigratingPerNamespace}} {
		if l.v != nil {
			*l.out = int(*l.v)
		}
	}
	if a.DefaultJobTTL != nil {
		cfg.JobTTL = a.DefaultJobTTL.Duration
	}
	var errs []error
	if a.DefaultJobMode != "" && a.DefaultJobMode != "ReservationFirst" {
		errs = append(errs, fmt.Errorf("defaultJobMode %q: Tandem moves a pod only once room is reserved for it; write ReservationFirst or leave it out", a.DefaultJobMode))
	}
	if a.Namespaces != nil {
		cfg.LowLoad.Include = append(cfg.LowLoad.Include, a.Namespaces.Include...)
		cfg.LowLoad.Exclude = append(cfg.LowLoad.Exclude, a.Namespaces.Exclude...)
	}
	if a.LabelSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(a.LabelSelector)
		if err != nil {
			errs = append(errs, fmt.Errorf("labelSelector: %w", err))
		} else {
			cfg.LowLoad.PodSelectors = append(cfg.LowLoad.PodSelectors, sel)
		}
	}
	var warnings []string
	var ignored []string
	for name, set := range map[string]bool{
		"maxConcurrentReconciles": a.MaxConcurrentReconciles != nil, "evictFailedBarePods": a.EvictFailedBarePods, "evictAllBarePods": a.EvictAllBarePods,
		"evictLocalStoragePods": a.EvictLocalStoragePods, "evictSystemCriticalPods": a.EvictSystemCriticalPods, "ignorePvcPods": a.IgnorePvcPods,
		"maxMigratingPerWorkload": a.MaxMigratingPerWorkload != nil, "maxUnavailablePerWorkload": a.MaxUnavailablePerWorkload != nil,
		"skipCheckExpectedReplicas": a.SkipCheckExpectedReplicas != nil, "objectLimiters": len(a.ObjectLimiters) > 0, "schedulerNames": a.SchedulerNames != nil,
		"evictQPS": len(a.EvictQPS) > 0, "evictBurst": a.EvictBurst != nil, "evictionPolicy": a.EvictionPolicy != "", "defaultDeleteOptions": len(a.DefaultDeleteOptions) > 0,
		"arbitrationArgs": len(a.ArbitrationArgs) > 0, "priorityThreshold": len(a.PriorityThreshold) > 0, "skipEvictionGates": len(a.SkipEvictionGates) > 0,
		"nodeFit (LowNodeLoad's nodeFit decides)": a.NodeFit,
	} {
		if set {
			ignored = append(ignored, name)
		}
	}
	slices.Sort(ignored)
	for _, n := range ignored {
		warnings = append(warnings, n+": not implemented by Tandem; ignored")
	}
	return warnings, errors.Join(errs...)
}

// Validate reports what the descheduler cannot run with.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < time.Second {
		errs = append(errs, fmt.Errorf("deschedulingInterval %v: use at least 1s", c.Interval))
	}
	for name, th := range map[string]lowload.Thresholds{"highThresholds": c.LowLoad.HighThresholds, "lowThresholds": c.LowLoad.LowThresholds, "prodHighThresholds": c.LowLoad.ProdHighThresholds} {
		for r, v := range th {
			if r != corev1.ResourceCPU && r != corev1.ResourceMemory {
				errs = append(errs, fmt.Errorf("%s.%s: Tandem compares cpu and memory only", name, r))
			}
			if v < 0 || v > 100 {
				errs = append(errs, fmt.Errorf("%s.%s: %v is not a percentage", name, r, v))
			}
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		lo, okL := c.LowLoad.LowThresholds[r]
		hi, okH := c.LowLoad.HighThresholds[r]
		if okL && okH && lo >= hi {
			errs = append(errs, fmt.Errorf("lowThresholds.%s %v must be below highThresholds.%s %v", r, lo, r, hi))
		}
	}
	if len(c.LowLoad.HighThresholds) == 0 && len(c.LowLoad.ProdHighThresholds) == 0 {
		errs = append(errs, errors.New("highThresholds: set at least one, or no node is ever hot"))
	}
	if c.LowLoad.MetricExpiration <= 0 {
		errs = append(errs, errors.New("nodeMetricExpirationSeconds: must be positive"))
	}
	if c.JobTTL < 10*time.Second {
		errs = append(errs, fmt.Errorf("defaultJobTTL %v: a migration needs at least 10s to reserve, evict and bind", c.JobTTL))
	}
	if c.LeaderElect && (c.LeaseName == "" || c.LeaseNamespace == "") {
		errs = append(errs, errors.New("leaderElection: resourceName and resourceNamespace must be set"))
	}
	return errors.Join(errs...)
}

// strict decodes js into out, refusing unknown keys with their names.
func strict(js []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return fmt.Errorf("%w; check the spelling against koord-descheduler's v1alpha2 API", err)
		}
		return err
	}
	return nil
}
