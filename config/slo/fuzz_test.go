package slo

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzParse feeds arbitrary text as one section of a ConfigMap. Whatever Parse accepts must validate or be
// rejected without panicking; whatever validates must resolve for any node; and writing the parsed config
// back out (nested form) and reading it again must resolve to the same values, so the typed structs lose
// nothing the operator wrote.
func FuzzParse(f *testing.F) {
	_, data := seed004(f)
	sections := SectionKeys()
	for i, key := range sections {
		f.Add(uint8(i), data[key])
	}
	f.Add(uint8(2), `{"nodeStrategies": [{"name": "a", "nodeSelector": {"matchExpressions": [{"key": "k", "operator": "Exists"}]}, "lsClass": {"cpuQOS": {"enable": true}}}]}`)
	f.Add(uint8(0), `{"Enable": true, "extensions": {"x": {"y": [1, 2]}}, "metricAggregatePolicy": {"durations": ["1h"]}}`)
	f.Add(uint8(4), `{"clusterStrategy": {"totalNetworkBandwidth": "10Gi", "schedFeatures": {"A": true}}}`)
	f.Add(uint8(5), `{"applications": [{"name": "a", "qos": "BE"}], "nodeConfigs": [{"name": "n", "nodeSelector": {"matchLabels": {"k": "v"}},
		"applications": [{"name": "b", "qos": "LS", "strategy": {}, "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "b"}}]}]}`)

	nodes := []map[string]string{nil, {"kubernetes.io/kernel": "anolis"}, {"k": "v", "a": "b"}}
	f.Fuzz(func(t *testing.T, which uint8, text string) {
		key := sections[int(which)%len(sections)]
		cfg := Parse(map[string]string{key: text})
		if len(cfg.Refused()) > 0 {
			if sectionPresent(cfg, key) {
				t.Fatalf("Parse kept section %s it refused: %v", key, cfg.Refused())
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse kept a section that does not validate: %v", err)
		}
		written, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal parsed config: %v", err)
		}
		reread, err := ParseFile(written)
		if err == nil {
			err = refusals(reread)
		}
		if err != nil {
			t.Fatalf("ParseFile(%s) = %v, but it came from a valid config", written, err)
		}
		for _, labels := range nodes {
			want, err := cfg.ForNode(labels)
			if err != nil {
				t.Fatalf("ForNode(%v) = %v on a valid config", labels, err)
			}
			got, err := reread.ForNode(labels)
			if err != nil {
				t.Fatalf("ForNode(%v) after a round trip = %v", labels, err)
			}
			if !sameResolved(got, want) {
				t.Fatalf("round trip through %s changed the resolved values for %v:\n got %+v\nwant %+v", written, labels, got, want)
			}
		}
	})
}

// sameResolved compares through JSON because resource.Quantity caches its string form, which reflect sees.
func sameResolved(a, b Resolved) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && reflect.DeepEqual(ja, jb)
}
