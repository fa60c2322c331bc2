package collector

import (
	"fmt"
	"path/filepath"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// libReader swaps in containerd/cgroups for the stat, to compare the cost.
type libReader struct {
	cgroupReader
	lib interface {
		stat(string) (cgroupStat, error)
	}
}

// files hands the cgroup's path itself to stat, which is what the library reads by.
func (l libReader) files(rel string) []string { return []string{rel} }

func (l libReader) stat(files []string) (cgroupStat, error) { return l.lib.stat(files[0]) }

func (l libReader) release([]string) {}

// BenchmarkUsageSample100 is one usage sample of a node with 100 containers on fake v1 and v2
// trees (the files are the kernel's size; tmpfs reads cost about what cgroupfs reads do), read
// directly (direct=true, what the collector does) and through containerd/cgroups (direct=false).
func BenchmarkUsageSample100(b *testing.B) {
	for _, tc := range []struct{ v2, direct bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		v2 := tc.v2
		b.Run(fmt.Sprintf("v2=%v/direct=%v", tc.v2, tc.direct), func(b *testing.B) {
			t := b
			_, ctx := ktesting.NewTestContext(b)
			dir := b.TempDir()
			proc, cg := filepath.Join(dir, "proc"), filepath.Join(dir, "cgroup")
			fakeProc(t, proc, 100, 100, 1000, 500)
			write := fakeV1Container
			if v2 {
				fakeV2Root(t, cg)
				write = fakeV2Cgroup
			} else {
				fakeV1Root(t, cg)
			}
			var targets []Target
			for i := range 100 {
				tg := Target{Namespace: "ns", Pod: fmt.Sprint("p", i), Container: "c", ContainerID: fmt.Sprint("id", i), CgroupParent: fmt.Sprint("/kubepods/pod", i)}
				write(t, cg, filepath.Join(tg.CgroupParent, tg.ContainerID), ctrCounters{cpuNanos: 1e9, usage: 1 << 20, total: 10})
				targets = append(targets, tg)
			}
			u := newUsageSource(proc, cg)
			if err := u.detect(ctx); err != nil {
				b.Fatal(err)
			}
			// The fake tree is not a cgroup filesystem; keep its files open as the reader does on one.
			switch r := u.reader.(type) {
			case *v1Reader:
				r.r.keep = true
			case *v2Reader:
				r.r.keep = true
			}
			if !tc.direct {
				if v2 {
					u.reader = libReader{u.reader, libV2{root: cg}}
				} else {
					u.reader = libReader{u.reader, libV1{root: cg}}
				}
			}
			b.ResetTimer()
			for b.Loop() {
				if s := u.sample(ctx, targets); len(s.Containers) != 100 {
					b.Fatalf("%d containers", len(s.Containers))
				}
			}
		})
	}
}
