package admission

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// PatchOperation is one RFC 6902 operation of the answer to the API server.
type PatchOperation struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// diff returns the operations that turn before into after, at the granularity of the members of
// metadata and spec (labels as a whole, containers as a whole, ...) and of the pod's other
// top-level members. It compares the decoded documents instead of encoding after and diffing the
// two texts (as a generic JSON diff does): measured on the pod of Koordinator's profile example
// with 20 profiles, the text diff took three quarters of the mutation's CPU, as it parses both
// documents again.
func diff(before, after podDoc) ([]PatchOperation, error) {
	var ops []PatchOperation
	for _, k := range unionKeys(before, after) {
		b, inB := before[k]
		a, inA := after[k]
		bm, bObj := b.(map[string]any)
		am, aObj := a.(map[string]any)
		if (k == "metadata" || k == "spec") && bObj && aObj {
			for _, sub := range unionKeys(bm, am) {
				sb, inSB := bm[sub]
				sa, inSA := am[sub]
				op, err := member("/"+escape(k)+"/"+escape(sub), sb, inSB, sa, inSA)
				if err != nil {
					return nil, err
				}
				if op != nil {
					ops = append(ops, *op)
				}
			}
			continue
		}
		op, err := member("/"+escape(k), b, inB, a, inA)
		if err != nil {
			return nil, err
		}
		if op != nil {
			ops = append(ops, *op)
		}
	}
	return ops, nil
}

func member(path string, before any, inBefore bool, after any, inAfter bool) (*PatchOperation, error) {
	switch {
	case inBefore && !inAfter:
		return &PatchOperation{Op: "remove", Path: path}, nil
	case inBefore && equalJSON(before, after):
		return nil, nil
	}
	v, err := json.Marshal(after)
	if err != nil {
		return nil, err
	}
	op := "replace"
	if !inBefore {
		op = "add"
	}
	return &PatchOperation{Op: op, Path: path, Value: v}, nil
}

func unionKeys(a, b map[string]any) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // a stable answer, for the logs and the tests
	return keys
}

// escape writes a member name as an RFC 6901 pointer token.
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// equalJSON compares two decoded JSON values (as decodeObject makes them).
func equalJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, av := range a {
			bv, ok := b[k]
			if !ok || !equalJSON(av, bv) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equalJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case nil:
		return b == nil
	case string, json.Number, bool, float64, int64:
		// A float64 from a profile's patch is not equal to its json.Number twin, which at worst
		// replaces a member with the same value.
		return a == b
	default:
		return reflect.DeepEqual(a, b)
	}
}

// deepCopy copies a decoded JSON value, so that the mutation can be compared with what came in.
func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = deepCopy(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = deepCopy(x)
		}
		return out
	default:
		return v
	}
}
