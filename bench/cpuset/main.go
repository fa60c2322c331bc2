// Command cpuset prints the cpuset allocator's decision-time distribution on a machine shape, by
// default the 96-CPU, 2-socket SMT tree: a node with 100 pods, of which -exclusive hold LSE/LSR CPUs
// and the rest run in the shared pools. Each decision releases one exclusive pod and allocates a new
// one of a random size and bind policy, so the node stays near full and fragmented.
//
//	go run ./bench/cpuset                      # the 96-CPU tree
//	go run ./bench/cpuset -sysfs /sys          # this machine
//
// The target is p99 ≤ 50 µs.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cpuset bench:", err)
		os.Exit(1)
	}
}

func run() error {
	sysfs := flag.String("sysfs", "resource/topology/testdata/96cpu-2socket-smt", "sysfs root of the machine shape")
	exclusive := flag.Int("exclusive", 40, "pods holding exclusive CPUs (the other pods of the 100 do not touch the allocator)")
	sizesFlag := flag.String("sizes", "1,1,1,2,2,2,4,4", "mix of request sizes in CPUs, drawn uniformly")
	ops := flag.Int("ops", 200_000, "decisions to time")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()

	var sizes []int
	for f := range strings.SplitSeq(*sizesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-sizes: %q is not a CPU count", f)
		}
		sizes = append(sizes, n)
	}
	topo, err := topology.Discover(*sysfs)
	if err != nil {
		return fmt.Errorf("run from the repository root or pass -sysfs: %w", err)
	}
	a, err := cpuset.New(topo, cpuset.DefaultConfig())
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(*seed, 100))
	policy := func() cpuset.BindPolicy {
		return []cpuset.BindPolicy{cpuset.FullPCPUs, cpuset.SpreadByPCPUs}[rng.IntN(2)]
	}
	class := func(i int) qos.Class { return []qos.Class{qos.LSE, qos.LSR}[i%2] }

	var held []string
	for i := 0; len(held) < *exclusive; i++ {
		if i == 100*(*exclusive) {
			return fmt.Errorf("only %d exclusive pods of the size mix fit on %s", len(held), topo)
		}
		owner := fmt.Sprintf("fill-%d", i)
		if _, err := a.Allocate(owner, class(i), sizes[rng.IntN(len(sizes))], policy()); err == nil {
			held = append(held, owner)
		}
	}
	p := a.Pools()
	fmt.Printf("machine: %s\n", topo)
	fmt.Printf("start:   %d exclusive pods hold %d CPUs (LSE %d, LSR %d), LS pool %d CPUs\n",
		len(held), p.LSE.Size()+p.LSR.Size(), p.LSE.Size(), p.LSR.Size(), p.LS.Size())

	samples := make([]time.Duration, 0, *ops)
	refused := 0
	for i := range *ops {
		j := rng.IntN(len(held))
		a.Release(held[j])
		owner := fmt.Sprintf("pod-%d", i)
		start := time.Now()
		_, err := a.Allocate(owner, class(i), sizes[rng.IntN(len(sizes))], policy())
		samples = append(samples, time.Since(start))
		if errdefs.IsResourceExhausted(err) {
			// Keep the pod count steady with a 1-CPU pod, which always fits after a release.
			refused++
			_, err = a.Allocate(owner, class(i), 1, policy())
		}
		if err != nil {
			return err
		}
		held[j] = owner
	}
	slices.Sort(samples)
	q := func(f float64) time.Duration { return samples[min(len(samples)-1, int(f*float64(len(samples))))] }
	fmt.Printf("allocate: %d decisions (%d refused as exhausted)\n", len(samples), refused)
	fmt.Printf("  p50 %v  p90 %v  p99 %v  p99.9 %v  max %v\n", q(0.50), q(0.90), q(0.99), q(0.999), samples[len(samples)-1])
	verdict := "meets"
	if q(0.99) > 50*time.Microsecond {
		verdict = "MISSES"
	}
	fmt.Printf("  target p99 <= 50µs: %s\n", verdict)
	return nil
}
