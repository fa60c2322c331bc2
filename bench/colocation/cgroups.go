package main

import (
	"time"

	"github.com/tandemkit/tandem/bench/internal/podcgroup"
)

// sumUsage is the CPU time of several cgroups together.
func sumUsage(paths []string) (time.Duration, error) {
	var total time.Duration
	for _, p := range paths {
		u, err := podcgroup.CPUUsage(p)
		if err != nil {
			return 0, err
		}
		total += u
	}
	return total, nil
}
