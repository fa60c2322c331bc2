package node

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

type patch struct {
	name, sub string
	pt        types.PatchType
	body      map[string]any
}

type fakePatcher struct {
	patches []patch
	err     error
}

func (f *fakePatcher) PatchNode(_ context.Context, name string, pt types.PatchType, data []byte, sub ...string) error {
	var body map[string]any
	if err := json.Unmarshal(data, &body); err != nil {
		return err
	}
	f.patches = append(f.patches, patch{name: name, sub: strings.Join(sub, "/"), pt: pt, body: body})
	return f.err
}

// TestWithdraw: uninstall takes the batch resources off the Node's status (capacity and allocatable)
// and removes the node-metric annotation, on the named Node only; an API error is returned.
func TestWithdraw(t *testing.T) {
	f := &fakePatcher{}
	if err := Withdraw(context.Background(), f, "node-1"); err != nil {
		t.Fatal(err)
	}
	if len(f.patches) != 2 {
		t.Fatalf("%d patches, want 2: %+v", len(f.patches), f.patches)
	}
	st := f.patches[0]
	if st.name != "node-1" || st.sub != "status" || st.pt != types.StrategicMergePatchType {
		t.Errorf("first patch %s %s %s, want a strategic merge patch of node-1's status", st.name, st.sub, st.pt)
	}
	for _, field := range []string{"capacity", "allocatable"} {
		m, _ := st.body["status"].(map[string]any)[field].(map[string]any)
		for _, r := range []string{"kubernetes.io/batch-cpu", "kubernetes.io/batch-memory"} {
			if v, ok := m[r]; !ok || v != nil {
				t.Errorf("status.%s.%s = %v (present %v), want null: the patch must delete it", field, r, v, ok)
			}
		}
	}
	an := f.patches[1]
	ann, _ := an.body["metadata"].(map[string]any)["annotations"].(map[string]any)
	if v, ok := ann["tandem.io/node-metric"]; an.name != "node-1" || an.sub != "" || an.pt != types.MergePatchType || !ok || v != nil {
		t.Errorf("second patch %s %q %s %v, want a merge patch of node-1 setting tandem.io/node-metric to null", an.name, an.sub, an.pt, an.body)
	}

	boom := errors.New("forbidden")
	if err := Withdraw(context.Background(), &fakePatcher{err: boom}, "node-1"); !errors.Is(err, boom) {
		t.Errorf("Withdraw with a failing API returned %v, want it to wrap %v", err, boom)
	}
}
