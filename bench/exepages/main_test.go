package main

import (
	"strings"
	"testing"

	"github.com/tandemkit/tandem/bench/internal/exepages"
)

func TestPrint(t *testing.T) {
	rep := exepages.Report{
		ResidentBytes: 3 << 20,
		ByModule:      map[string]int64{exepages.Std: 2 << 20, "k8s.io/api": 1 << 20},
		ByPackage:     map[string]int64{"runtime": 2 << 20, "k8s.io/api/core/v1": 768 << 10, "k8s.io/api/policy/v1": 256 << 10},
	}
	var b strings.Builder
	if err := writeReport(&b, 42, rep, 2); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"pid 42: 3.00 MiB", "2.00  std", "1.00  k8s.io/api", "0.75  k8s.io/api/core/v1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// --packages 2 lists the two largest packages only.
	if strings.Contains(out, "k8s.io/api/policy/v1") {
		t.Errorf("output lists a third package with --packages 2:\n%s", out)
	}
}
