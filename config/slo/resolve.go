package slo

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sjson "sigs.k8s.io/json"
)

// ForNode resolves the configuration for a node with the given labels.
//
// Merge semantics, per section, follow Koordinator's slo-controller: start from Koordinator's defaults,
// decode the cluster strategy onto them, then the first node strategy (in list order) whose nodeSelector
// matches. A key a strategy does not write keeps the value beneath it (so a node strategy setting only
// beClass.memoryQOS.wmarkRatio keeps every other class and knob), maps merge key by key, and a list that is
// written replaces the list beneath it (Koordinator merges list elements by position there; no list Tandem
// consumes is affected). Later matching strategies are ignored and reported in Resolved.Matches.
//
// A nodeSelector that cannot be converted to a selector is an error naming it; Validate reports the same.
func (c *Config) ForNode(nodeLabels map[string]string) (Resolved, error) {
	if c == nil {
		c = &Config{}
	}
	set := labels.Set(nodeLabels)
	r := defaultResolved()
	var errs []error
	for _, key := range SectionKeys() {
		s := c.sections[key]
		if s == nil {
			continue
		}
		node, match, err := s.firstMatch(key, set)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if match != nil {
			r.Matches = append(r.Matches, *match)
		}
		if err := overlay(r.settings(key), layers(key, s.cluster, node)...); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Resolved{}, err
	}
	finishResourceThreshold(&r.ResourceThreshold)
	return r, nil
}

// layers returns the strategies section key resolves from, bottom first: the cluster strategy, then the
// node strategy (nil when none matched). A host-application-config node config replaces the cluster's
// list rather than overlaying it, as in Koordinator; decoding it onto the cluster's list would also merge
// applications by position.
func layers(key string, cluster, node *strategy) []*strategy {
	if key == HostApplicationConfigKey && node != nil {
		return []*strategy{node}
	}
	return []*strategy{cluster, node}
}

// overlay decodes each strategy's keys onto out, in order; nil strategies are skipped. Decoding onto a
// value leaves what the JSON does not mention as it was, which is exactly Koordinator's merge.
func overlay(out any, layers ...*strategy) error {
	for _, l := range layers {
		if l == nil || l.keys == nil {
			continue
		}
		js, err := json.Marshal(l.keys)
		if err != nil {
			return err
		}
		if err := sjson.UnmarshalCaseSensitivePreserveInts(js, out); err != nil {
			return fmt.Errorf("%s: %w", l.path, err)
		}
	}
	return nil
}

// firstMatch returns the first node strategy whose selector matches set, and the match to report.
func (s *section) firstMatch(key string, set labels.Set) (*strategy, *NodeMatch, error) {
	var applied *strategy
	var match *NodeMatch
	var errs []error
	for i := range s.nodes {
		n := &s.nodes[i]
		ok, err := selects(n.NodeSelector, set)
		if err != nil {
			errs = append(errs, &FieldError{Path: n.path + ".nodeSelector", Message: err.Error()})
			continue
		}
		if !ok {
			continue
		}
		if match == nil {
			applied, match = n, &NodeMatch{Section: key, Applied: n.Name}
			continue
		}
		match.Ignored = append(match.Ignored, n.Name)
	}
	return applied, match, errors.Join(errs...)
}

// selects reports whether the selector matches the labels; a nil selector matches nothing.
func selects(sel *metav1.LabelSelector, set labels.Set) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(set), nil
}

// MarshalJSON writes the sections in the nested form ParseFile reads.
func (c *Config) MarshalJSON() ([]byte, error) {
	out := map[string]any{}
	for key, s := range c.sections {
		var nodes []any
		for _, n := range s.nodes {
			m := maps.Clone(n.keys)
			if m == nil {
				m = map[string]any{}
			}
			m["name"], m["nodeSelector"] = n.Name, n.NodeSelector
			nodes = append(nodes, m)
		}
		var cluster map[string]any
		if s.cluster != nil {
			cluster = s.cluster.keys
		}
		if inline(key) {
			m := maps.Clone(cluster)
			if m == nil {
				m = map[string]any{}
			}
			m["nodeConfigs"] = nodes
			out[key] = m
			continue
		}
		out[key] = map[string]any{"clusterStrategy": cluster, "nodeStrategies": nodes}
	}
	return json.Marshal(out)
}
