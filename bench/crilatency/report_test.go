package main

import (
	"testing"

	"github.com/tandemkit/tandem/bench/internal/exepages"
)

func TestExecutableLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    idleCost
		want string
	}{
		{
			name: "large modules by name, small ones summed",
			c: idleCost{Executable: &exepages.Report{ResidentBytes: 3 << 20, ByModule: map[string]int64{
				exepages.Std: 2 << 20, "k8s.io/api": 900 << 10, exepages.Unattributed: 100 << 10, "a": 12 << 10, "b": 12 << 10,
			}}},
			want: "3.00 MiB: std 2.00, k8s.io/api 0.88, (unattributed) 0.10, 2 others 0.02",
		},
		{
			name: "nothing small",
			c:    idleCost{Executable: &exepages.Report{ResidentBytes: 1 << 20, ByModule: map[string]int64{exepages.Std: 1 << 20}}},
			want: "1.00 MiB: std 1.00",
		},
		{
			name: "not measured",
			c:    idleCost{ExecutableErr: "open the page map of pid 7: permission denied"},
			want: "not measured: open the page map of pid 7: permission denied",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := executableLine(tc.c); got != tc.want {
				t.Errorf("executableLine = %q, want %q", got, tc.want)
			}
		})
	}
}
