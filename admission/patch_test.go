package admission

import (
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

// TestDiff applies diff's operations with the JSON-patch library the API server uses and checks
// the result is the mutated document.
func TestDiff(t *testing.T) {
	for _, tc := range []struct{ name, before, after string }{
		{"nothing", `{"metadata":{"name":"p"},"spec":{"a":1}}`, `{"metadata":{"name":"p"},"spec":{"a":1}}`},
		{"label added to none", `{"metadata":{"name":"p"}}`, `{"metadata":{"name":"p","labels":{"a/b":"x"}}}`},
		{"label changed", `{"metadata":{"labels":{"x~y/z":"1"}}}`, `{"metadata":{"labels":{"x~y/z":"2"}}}`},
		{"spec member removed", `{"spec":{"preemptionPolicy":"Never","priority":1}}`, `{"spec":{"priority":5000}}`},
		{"spec added", `{"metadata":{}}`, `{"metadata":{},"spec":{"schedulerName":"s"}}`},
		{"odd member names", `{"metadata":{},"a/b~c":1}`, `{"metadata":{},"a/b~c":2,"x":null}`},
		{"container list replaced", `{"spec":{"containers":[{"name":"a","x":true,"resources":{"requests":{"cpu":"1"}}}]}}`,
			`{"spec":{"containers":[{"name":"a","x":true,"resources":{"requests":{"kubernetes.io/batch-cpu":"1000"}}}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := decodeObject([]byte(tc.before))
			if err != nil {
				t.Fatal(err)
			}
			after, err := decodeObject([]byte(tc.after))
			if err != nil {
				t.Fatal(err)
			}
			ops, err := diff(before, after)
			if err != nil {
				t.Fatal(err)
			}
			if tc.before == tc.after && len(ops) != 0 {
				t.Errorf("ops %+v for no change", ops)
			}
			b, _ := json.Marshal(ops)
			patch, err := jsonpatch.DecodePatch(b)
			if err != nil {
				t.Fatal(err)
			}
			got, err := patch.Apply([]byte(tc.before))
			if err != nil {
				t.Fatalf("apply %s: %v", b, err)
			}
			if !jsonpatch.Equal(got, []byte(tc.after)) {
				t.Errorf("patched %s, want %s (ops %s)", got, tc.after, b)
			}
		})
	}
}
