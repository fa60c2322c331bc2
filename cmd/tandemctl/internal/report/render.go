package report

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// Format is an output format: Table, Wide or JSON.
type Format string

// The formats of -o.
const (
	Table Format = ""
	Wide  Format = "wide"
	JSON  Format = "json"
)

// ParseFormat reads the value of -o.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Table, Wide, JSON:
		return f, nil
	}
	return "", fmt.Errorf("output format %q: want wide or json, or no -o for the table", s)
}

// Marks in table cells, explained under the table.
const (
	markFromStore = "*"
	markDiffers   = "!"
)

// cell shows the kernel's value; the proxy's in brackets where they differ; the proxy's marked with *
// where the kernel's could not be read; "-" where neither is known.
func cell(f Field) string {
	switch {
	case f.Unread != "" && f.Applied != "":
		return f.Applied + markFromStore
	case f.Unread != "":
		return "-"
	case f.Differs:
		return fmt.Sprintf("%s (proxy %s)%s", f.Kernel, f.Applied, markDiffers)
	}
	return f.Kernel
}

// WritePods renders the pods report.
func WritePods(w io.Writer, p *Pods, format Format) error {
	if format == JSON {
		return writeJSON(w, p)
	}
	if len(p.Containers) == 0 {
		_, err := fmt.Fprintln(w, "No running containers in tandem-proxy's store.")
		return err
	}
	shares := "SHARES"
	if p.CgroupVersion == 2 {
		shares = "WEIGHT"
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := []string{"NAMESPACE/POD", "CONTAINER", "QOS", "CPUSET", "QUOTA/PERIOD", shares, "CPU.IDLE", "MEMORY"}
	if format == Wide {
		head = append(head, "STATE", "CONTAINER ID", "CGROUP")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	type note struct{ who, why string }
	var fromStore []note
	for _, c := range p.Containers {
		qos := string(c.QoS)
		if qos == "" {
			qos = "-"
		}
		row := []string{c.Namespace + "/" + c.Pod, c.Name, qos}
		var reasons []string
		for _, f := range c.fields() {
			row = append(row, cell(f))
			if f.Unread != "" && f.Applied != "" && !slices.Contains(reasons, f.Unread) {
				reasons = append(reasons, f.Unread)
			}
		}
		if format == Wide {
			cg := c.Cgroup
			if cg == "" {
				cg = "-"
			}
			row = append(row, strings.TrimPrefix(c.State, "CONTAINER_"), short(c.ID), cg)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
		if len(reasons) > 0 {
			fromStore = append(fromStore, note{fmt.Sprintf("%s/%s %s", c.Namespace, c.Pod, c.Name), strings.Join(reasons, "; ")})
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(fromStore) > 0 {
		fmt.Fprintf(w, "\n%s not read from the kernel; the value tandem-proxy last applied is shown:\n", markFromStore)
		same := len(fromStore) == len(p.Containers) && len(fromStore) > 1
		for _, n := range fromStore[1:] {
			same = same && n.why == fromStore[0].why
		}
		if same {
			// One cause for every row (no hierarchy at --cgroup-root): say it once.
			fromStore = []note{{"every container", fromStore[0].why}}
		}
		for _, n := range fromStore {
			fmt.Fprintf(w, "    %s: %s\n", n.who, n.why)
		}
	}
	if n := p.Differences(); n > 0 {
		values := "values differ"
		if n == 1 {
			values = "value differs"
		}
		_, err := fmt.Fprintf(w, "\n%s %d %s between the kernel and tandem-proxy: the kernel's value comes first, the one the proxy last applied in brackets.\n", markDiffers, n, values)
		return err
	}
	return nil
}

// WritePools renders the pools report.
func WritePools(w io.Writer, p *Pools, format Format) error {
	if format == JSON {
		return writeJSON(w, p)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tCPUS\tCOUNT")
	for _, pl := range p.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", pl.Class, orDash(pl.CPUs), pl.Count)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Allocations) == 0 {
		_, err := fmt.Fprintln(w, "\nNo exclusive CPUs are allocated.")
		return err
	}
	fmt.Fprintln(w, "\nEXCLUSIVE CPUS")
	head := "NAMESPACE/POD\tCONTAINER\tCLASS\tCPUS\tCOUNT"
	if format == Wide {
		head += "\tPOD UID"
	}
	fmt.Fprintln(tw, head)
	for _, a := range p.Allocations {
		pod := a.Namespace + "/" + a.Pod
		if a.Pod == "" {
			// The proxy holds CPUs for a pod its store no longer lists: worth seeing.
			pod = "(pod uid " + a.PodUID + ")"
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%d", pod, a.Container, a.Class, orDash(a.CPUs), a.Count)
		if format == Wide {
			row += "\t" + a.PodUID
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
