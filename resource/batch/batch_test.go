package batch

import (
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    map[string]Container
		wantErr bool
	}{
		{
			name: "koordinator's shape",
			in:   `{"containers":{"app":{"requests":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"1Gi"},"limits":{"kubernetes.io/batch-cpu":"4000","kubernetes.io/batch-memory":"2Gi"}}}}`,
			want: map[string]Container{"app": {CPURequestMilli: 2000, CPULimitMilli: 4000, MemoryRequest: 1 << 30, MemoryLimit: 2 << 30}},
		},
		{name: "requests only", in: `{"containers":{"a":{"requests":{"kubernetes.io/batch-cpu":"500"}}}}`, want: map[string]Container{"a": {CPURequestMilli: 500}}},
		{name: "empty", in: `{}`, want: map[string]Container{}},
		{name: "not json", in: `{containers`, wantErr: true},
		{name: "bad quantity", in: `{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"lots"}}}}`, wantErr: true},
		{name: "fractional", in: `{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"0.5"}}}}`, wantErr: true},
		{name: "negative", in: `{"containers":{"a":{"limits":{"kubernetes.io/batch-memory":"-1"}}}}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSpec(tt.in)
			if tt.wantErr {
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("ParseSpec = %v, %v; want InvalidArgument", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("ParseSpec = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("container %s = %+v, want %+v", k, got[k], v)
				}
			}
		})
	}
}

func TestTranslation(t *testing.T) {
	t.Parallel()
	// The formulas of the issue: shares = request × 1024 / 1000 clamped to [2, 262144];
	// quota = limit × period / 1000, -1 without a limit.
	for _, tt := range []struct{ req, shares int64 }{{0, 2}, {1, 2}, {500, 512}, {2000, 2048}, {1 << 30, 262144}} {
		if got := CPUShares(tt.req); got != tt.shares {
			t.Errorf("CPUShares(%d) = %d, want %d", tt.req, got, tt.shares)
		}
	}
	for _, tt := range []struct{ limit, period, quota int64 }{{0, 100000, -1}, {2000, 100000, 200000}, {500, 0, 50000}, {1500, 50000, 75000}} {
		if got := CFSQuota(tt.limit, tt.period); got != tt.quota {
			t.Errorf("CFSQuota(%d, %d) = %d, want %d", tt.limit, tt.period, got, tt.quota)
		}
	}
	s := Sum(map[string]Container{"a": {CPURequestMilli: 500, CPULimitMilli: 1000, MemoryLimit: 1 << 20}, "b": {CPURequestMilli: 500, CPULimitMilli: 0, MemoryLimit: 1 << 20}})
	if s.CPURequestMilli != 1000 || s.CPULimitMilli != 0 || s.MemoryLimit != 2<<20 {
		t.Errorf("Sum = %+v: want requests added, cpu unlimited (b has no limit), memory added", s)
	}
}

func FuzzParseSpec(f *testing.F) {
	f.Add(`{"containers":{"a":{"limits":{"kubernetes.io/batch-cpu":"1k"}}}}`)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSpec(s)
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Fatalf("error of the wrong class: %v", err)
		}
		for _, c := range got {
			if c.CPULimitMilli < 0 || c.MemoryLimit < 0 {
				t.Fatalf("negative value accepted: %+v", c)
			}
		}
	})
}
