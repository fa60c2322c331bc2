// Package knob says what each key of the slo-controller-config does on one node: applied, off, ignored
// because the node's kernel lacks what it needs, or accepted but not implemented by Tandem. An operator
// who brings Koordinator's ConfigMap reads it (tandemctl config) instead of the code: a setting that
// parses and then does nothing must never look as if it were in force.
//
// Each part of the agent that acts on a section reports its own keys, from what it detected on the node
// and the configuration it was last given; the agent merges the reports (see Merge).
package knob

import (
	"cmp"
	"slices"
)

// State is what one key does on this node.
type State string

// The states, from the operator's point of view.
const (
	// Applied: the setting is in force on this node.
	Applied State = "applied"
	// Off: understood and implemented, but the configuration leaves it unset or disabled here.
	Off State = "off"
	// Ignored: implemented, but this node lacks what it needs (a kernel file, a controller); Detail
	// names what is missing.
	Ignored State = "ignored"
	// Refused: implemented, but the value was refused on this node (Detail says why); the node keeps
	// what it had.
	Refused State = "refused"
	// Unsupported: parsed and accepted so that the ConfigMap loads, but Tandem does not act on it.
	Unsupported State = "unsupported"
)

// Status is one key's state.
type Status struct {
	// Section is the ConfigMap key (colocation-config, system-config, ...).
	Section string `json:"section"`
	// Key is the field's JSON path within the section's strategy, dotted: minFreeKbytesFactor,
	// lsClass.memoryQOS.wmarkRatio, applications[nginx].
	Key string `json:"key"`
	// Value is the value in force for this node, as JSON; empty when unset.
	Value string `json:"value,omitempty"`
	State State  `json:"state"`
	// Detail says why, in words an operator can act on.
	Detail string `json:"detail,omitempty"`
}

// Reporter is implemented by what acts on slo-config keys.
type Reporter interface {
	// Knobs reports the keys it acts on, for the configuration it was last given.
	Knobs() []Status
}

// Merge lays each report over base, matched by section and key: a later report replaces an earlier
// state for the same key, and keys only a report names are added. The result is sorted by section,
// then key.
func Merge(base []Status, reports ...[]Status) []Status {
	type id struct{ section, key string }
	at := map[id]int{}
	out := make([]Status, 0, len(base))
	for _, list := range append([][]Status{base}, reports...) {
		for _, s := range list {
			k := id{s.Section, s.Key}
			if i, ok := at[k]; ok {
				if s.Value == "" {
					s.Value = out[i].Value
				}
				out[i] = s
				continue
			}
			at[k] = len(out)
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b Status) int {
		return cmp.Or(cmp.Compare(a.Section, b.Section), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// ReporterFunc adapts a function to Reporter.
type ReporterFunc func() []Status

// Knobs calls f.
func (f ReporterFunc) Knobs() []Status { return f() }
