package proxy

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/hooks"
)

// TestResourcesCRIRoundTrip: every field the hooks' Resources share with CRI survives a trip into a CRI
// request and back; the RDT class, which CRI lacks, does not travel.
func TestResourcesCRIRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		r    *hooks.Resources
		want *hooks.Resources
	}{
		{name: "every field", r: &hooks.Resources{
			CPUPeriod: 100000, CPUQuota: 50000, CPUShares: 512, MemoryLimitInBytes: 1 << 30, MemorySwapLimitInBytes: 2 << 30,
			OomScoreAdj: 1000, CpusetCpus: "0-3", CpusetMems: "0", HugepageLimits: map[string]uint64{"2MB": 4 << 20, "1GB": 0},
			Unified: map[string]string{"cpu.idle": "1"}, RDTClass: "BE",
		}, want: &hooks.Resources{
			CPUPeriod: 100000, CPUQuota: 50000, CPUShares: 512, MemoryLimitInBytes: 1 << 30, MemorySwapLimitInBytes: 2 << 30,
			OomScoreAdj: 1000, CpusetCpus: "0-3", CpusetMems: "0", HugepageLimits: map[string]uint64{"2MB": 4 << 20, "1GB": 0},
			Unified: map[string]string{"cpu.idle": "1"},
		}},
		{name: "zero", r: &hooks.Resources{}, want: &hooks.Resources{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cri := &runtimeapi.LinuxContainerResources{}
			applyResources(cri, hooks.Whole(tt.r))
			if got := resourcesFromCRI(cri); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("round trip = %+v, want %+v", got, tt.want)
			}
		})
	}
	if resourcesFromCRI(nil) != nil {
		t.Fatal("resourcesFromCRI(nil) is not nil")
	}
}

// TestApplyResourcesToCRI: an adjustment replaces the fields it sets, adds or replaces map entries, and
// leaves the rest of kubelet's request alone; hugepage limits come in page size order.
func TestApplyResourcesToCRI(t *testing.T) {
	tests := []struct {
		name string
		in   *runtimeapi.LinuxContainerResources
		a    *hooks.ResourceAdjustment
		want *runtimeapi.LinuxContainerResources
	}{
		{name: "nil adjustment",
			in:   &runtimeapi.LinuxContainerResources{CpuShares: 2},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 2}},
		{name: "set fields replace, others stay",
			in:   &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuQuota: 100000, CpusetCpus: "0-15"},
			a:    &hooks.ResourceAdjustment{CPUQuota: hooks.Int64(-1), CpusetCpus: hooks.String("2-15"), RDTClass: hooks.String("BE")},
			want: &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuQuota: -1, CpusetCpus: "2-15"}},
		{name: "map entries added or replaced",
			in: &runtimeapi.LinuxContainerResources{
				Unified:        map[string]string{"memory.high": "max", "cpu.idle": "0"},
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 1}},
			},
			a: &hooks.ResourceAdjustment{
				Unified:        map[string]string{"cpu.idle": "1"},
				HugepageLimits: map[string]uint64{"2MB": 2, "1GB": 3, "64KB": 4},
			},
			want: &runtimeapi.LinuxContainerResources{
				Unified:        map[string]string{"memory.high": "max", "cpu.idle": "1"},
				HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 2}, {PageSize: "1GB", Limit: 3}, {PageSize: "64KB", Limit: 4}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applyResources(tt.in, tt.a)
			if !proto.Equal(tt.in, tt.want) {
				t.Fatalf("applied = %v, want %v", tt.in, tt.want)
			}
		})
	}
}
