//go:build e2e

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tandemkit/tandem/metrics/nodemetric"
	"github.com/tandemkit/tandem/metrics/reporter"
)

// TestCapacityExplained asks each node's agent, with `tandemctl capacity`, why its batch capacity
// is what it is, and checks the answer against the Node: the batch-cpu and batch-memory the agent
// says it published are the Node's allocatable, its terms add up to the batch figure as the
// formula says, the table names the deciding term, and the Node's tandem.io/batch-capacity
// annotation names the same term.
func TestCapacityExplained(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	cs := client(t)
	bin := tandemctl(ctx, t)
	for _, n := range suite.c.Nodes {
		t.Run(n.Name, func(t *testing.T) {
			socket := proxyDebugSocket(t, n.Name)
			var last string
			// The agent steps every few seconds and writes when figures move: read both sides until one
			// write's figures are on both (they can cross a write once).
			err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				out, err := exec.CommandContext(ctx, bin, "--proxy-debug-socket", socket, "capacity", "-o", "json").Output()
				if err != nil {
					last = fmt.Sprintf("tandemctl capacity: %v", err)
					return false, nil
				}
				var st reporter.CapacityStatus
				if err := json.Unmarshal(out, &st); err != nil {
					return false, fmt.Errorf("tandemctl capacity -o json: %w: %s", err, out)
				}
				if !st.Computed || st.Published == nil || st.CPU == nil {
					last = fmt.Sprintf("not computed or not published yet: %s", st.Why)
					return false, nil
				}
				node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				cpu := node.Status.Allocatable[nodemetric.ResourceBatchCPU]
				mem := node.Status.Allocatable[nodemetric.ResourceBatchMemory]
				if cpu.Value() != st.Published.CPUMilli || mem.Value() != st.Published.MemoryBytes {
					last = fmt.Sprintf("the Node has batch-cpu %s and batch-memory %s, tandemctl says %d and %d were published", cpu.String(), mem.String(), st.Published.CPUMilli, st.Published.MemoryBytes)
					return false, nil
				}
				var note reporter.CapacityNote
				if err := json.Unmarshal([]byte(node.Annotations[reporter.CapacityAnnotation]), &note); err != nil {
					last = fmt.Sprintf("%s = %q: %v", reporter.CapacityAnnotation, node.Annotations[reporter.CapacityAnnotation], err)
					return false, nil
				}
				if note.CPUTerm != st.CPU.Bound || note.MemoryTerm != st.Memory.Bound {
					last = fmt.Sprintf("the Node says %s/%s decide, tandemctl %s/%s", note.CPUTerm, note.MemoryTerm, st.CPU.Bound, st.Memory.Bound)
					return false, nil
				}
				for res, tm := range map[string]*reporter.Terms{"cpu": st.CPU, "memory": st.Memory} {
					want := max(tm.Capacity-tm.Safety-tm.System-tm.HP, 0)
					if tm.Cap > 0 {
						want = min(want, tm.Cap)
					}
					if tm.Ceiling > 0 {
						want = min(want, tm.Ceiling)
					}
					if tm.Batch != want {
						return false, fmt.Errorf("%s terms %+v do not make its batch figure: want %d", res, tm, want)
					}
				}
				t.Logf("batch-cpu %s: %s; batch-memory %s: %s", cpu.String(), note.CPU, mem.String(), note.Memory)
				return true, nil
			})
			if err != nil {
				t.Fatalf("%v; last: %s", err, last)
			}
			out, err := exec.CommandContext(ctx, bin, "--proxy-debug-socket", socket, "capacity").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "decided by") || !strings.Contains(string(out), "on the Node") {
				t.Errorf("tandemctl capacity: %v:\n%s", err, out)
			}
		})
	}
}
