package report

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/tandemkit/tandem/config/knob"
)

// ConfigDump is the agent's /debug/config: every slo-config key with its state on the node.
type ConfigDump struct {
	Node string        `json:"node"`
	Keys []knob.Status `json:"keys"`
}

// Config returns what each slo-config key does on the agent's node.
func (c *Client) Config(ctx context.Context) (*ConfigDump, error) {
	var d ConfigDump
	if err := c.get(ctx, "/debug/config", &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// FilterStates keeps the keys in the listed states (all when states is empty); unknown states are an error.
func FilterStates(d *ConfigDump, states []string) (*ConfigDump, error) {
	if len(states) == 0 {
		return d, nil
	}
	known := []knob.State{knob.Applied, knob.Off, knob.Ignored, knob.Refused, knob.Unsupported}
	want := map[knob.State]bool{}
	for _, s := range states {
		st := knob.State(strings.ToLower(strings.TrimSpace(s)))
		if !slices.Contains(known, st) {
			return nil, fmt.Errorf("--state %q: want applied, off, ignored, refused or unsupported", s)
		}
		want[st] = true
	}
	out := &ConfigDump{Node: d.Node}
	for _, k := range d.Keys {
		if want[k.State] {
			out.Keys = append(out.Keys, k)
		}
	}
	return out, nil
}

// WriteConfig renders the configuration report: one row per key, and a count per state under it. The
// table cuts long values; -o wide and json show them whole.
func WriteConfig(w io.Writer, d *ConfigDump, format Format) error {
	if format == JSON {
		return writeJSON(w, d)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SECTION\tKEY\tVALUE\tSTATE\tDETAIL")
	count := map[knob.State]int{}
	for _, k := range d.Keys {
		count[k.State]++
		value := orDash(k.Value)
		if format != Wide && len(value) > 40 {
			value = value[:37] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.Section, k.Key, value, k.State, k.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var parts []string
	for _, s := range []knob.State{knob.Applied, knob.Off, knob.Ignored, knob.Refused, knob.Unsupported} {
		if count[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[s], s))
		}
	}
	node := d.Node
	if node == "" {
		node = "this node"
	}
	_, err := fmt.Fprintf(w, "\n%s: %s.\n", node, strings.Join(parts, ", "))
	return err
}
