// Command stalls tells whether the machine itself takes CPU time from the guest: it spins one
// thread per CPU (pinned, nice -20, in the bench's own cgroup) and records every gap longer than
// -gap between two consecutive reads of the clock, then prints, per CPU, how many gaps there were
// and the longest, beside the steal time /proc/stat counted over the same window. It runs twice per
// round: with one CPU busy and with every CPU busy, because a hypervisor only steals from a virtual
// CPU that wants to run.
//
// On bare metal or a VM with dedicated CPUs the gaps are interrupts and kernel threads: well under
// 10 ms and no steal. On a shared host, a guest whose CPUs are all busy (as colocation makes them)
// loses them for tens of milliseconds at a time; one such stall decides an LS p99.9, and no policy
// inside the guest can prevent it. bench/colocation counts steal per cell for this reason; run this
// first to know what a machine can show.
//
//	go run ./bench/stalls [-duration 20s] [-rounds 2]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/bench/internal/figures"
)

type result struct {
	cpu     int
	gaps    int
	longest time.Duration
	total   time.Duration
}

func main() {
	d := flag.Duration("duration", 20*time.Second, "how long each measurement spins")
	rounds := flag.Int("rounds", 2, "how many times each measurement (one CPU busy, all busy) runs, interleaved")
	gap := flag.Duration("gap", time.Millisecond, "a pause between two clock reads longer than this counts as a stall")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *d, *rounds, *gap)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, d time.Duration, rounds int, gap time.Duration) error {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return fmt.Errorf("open /proc: %w", err)
	}
	steal := func() (float64, error) {
		st, err := fs.Stat()
		if err != nil {
			return 0, fmt.Errorf("read /proc/stat: %w", err)
		}
		return st.CPUTotal.Steal, nil
	}
	all := make([]int, runtime.NumCPU())
	for i := range all {
		all[i] = i
	}
	fmt.Printf("stalls: %d CPUs, %s per measurement, gaps > %s counted\nmachine: %s\n", len(all), d, gap, figures.ReadMachine().Line())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tbusy CPUs\tcpu\tgaps\tlongest ms\tstalled ms\tsteal ms (machine)\t")
	for r := 1; r <= rounds; r++ {
		for _, cpus := range [][]int{{0}, all} {
			before, err := steal()
			if err != nil {
				return err
			}
			res := spin(ctx, cpus, d, gap)
			after, err := steal()
			if err != nil {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for _, x := range res {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.1f\t%.0f\t%.0f\t\n", r, len(cpus), x.cpu, x.gaps,
					float64(x.longest)/float64(time.Millisecond), float64(x.total)/float64(time.Millisecond), (after-before)*1000)
			}
		}
	}
	return tw.Flush()
}

// spin runs one spinning thread on each of cpus for d and returns their gaps, in CPU order.
func spin(ctx context.Context, cpus []int, d, gap time.Duration) []result {
	out := make([]result, len(cpus))
	var wg sync.WaitGroup
	for i, cpu := range cpus {
		wg.Go(func() {
			// The thread dies with the goroutine (no UnlockOSThread), so its affinity and nice value
			// never leak into the Go runtime's other threads.
			runtime.LockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			_ = unix.SchedSetaffinity(0, &set)
			_ = unix.Setpriority(unix.PRIO_PROCESS, 0, -20)
			res := result{cpu: cpu}
			start := time.Now()
			last := start
			for n := 0; ; n++ {
				now := time.Now()
				if g := now.Sub(last); g > gap {
					res.gaps++
					res.total += g
					res.longest = max(res.longest, g)
				}
				last = now
				if now.Sub(start) > d || (n%1_000_000 == 0 && ctx.Err() != nil) {
					break
				}
			}
			out[i] = res
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b result) int { return a.cpu - b.cpu })
	return out
}
