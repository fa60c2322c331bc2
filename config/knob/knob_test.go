package knob

import (
	"reflect"
	"testing"
)

func TestMerge(t *testing.T) {
	t.Parallel()
	base := []Status{
		{Section: "system-config", Key: "watermarkScaleFactor", Value: "150", State: Unsupported},
		{Section: "colocation-config", Key: "enable", Value: "true", State: Applied},
	}
	report := []Status{
		{Section: "system-config", Key: "watermarkScaleFactor", State: Applied, Detail: "/proc/sys/vm/watermark_scale_factor = 150"},
		{Section: "host-application-config", Key: "applications[nginx]", State: Ignored, Detail: "cgroup missing"},
	}
	got := Merge(base, report)
	want := []Status{
		{Section: "colocation-config", Key: "enable", Value: "true", State: Applied},
		{Section: "host-application-config", Key: "applications[nginx]", State: Ignored, Detail: "cgroup missing"},
		// The report's state wins; the value it left empty is kept.
		{Section: "system-config", Key: "watermarkScaleFactor", Value: "150", State: Applied, Detail: "/proc/sys/vm/watermark_scale_factor = 150"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Merge =\n%+v\nwant\n%+v", got, want)
	}
}
