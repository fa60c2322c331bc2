// Command exepages prints where a running Go program's resident executable pages come from, by Go
// module and by package: what VmRSS a library costs a node whether its code runs or not. It reads the
// process's page map, so it runs as root (or as the process's owner with ptrace rights), on the node
// where the program runs:
//
//	go run ./bench/exepages --pid $(pidof tandem-proxy) [--packages 30]
//
// bench/crilatency prints the module split of tandem-proxy and of its floor at rest; this command is
// for a process the benchmark did not start (a tandem-proxy on a node, tandem-nri, an older build).
// docs/performance.md says how to read the figures.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tandemkit/tandem/bench/internal/exepages"
)

func main() {
	pid := pflag.Int("pid", 0, "process to measure")
	packages := pflag.Int("packages", 30, "how many of the largest packages to list after the modules")
	pflag.Parse()
	if *pid <= 0 {
		fmt.Fprintln(os.Stderr, "exepages: --pid is required")
		os.Exit(2)
	}
	rep, err := exepages.Measure(*pid)
	if err != nil {
		fmt.Fprintf(os.Stderr, "exepages: %v\n", err)
		os.Exit(1)
	}
	if err := writeReport(os.Stdout, *pid, rep, *packages); err != nil {
		fmt.Fprintf(os.Stderr, "exepages: %v\n", err)
		os.Exit(1)
	}
}

func writeReport(w io.Writer, pid int, rep exepages.Report, packages int) error {
	mib := func(b int64) string { return fmt.Sprintf("%8.2f", float64(b)/(1<<20)) }
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d: %s MiB of its executable resident\n\n     MiB  module\n", pid, strings.TrimSpace(mib(rep.ResidentBytes)))
	for _, s := range rep.Sorted() {
		fmt.Fprintf(&b, "%s  %s\n", mib(s.Bytes), s.Name)
	}
	b.WriteString("\n     MiB  package\n")
	for i, s := range rep.SortedPackages() {
		if i == packages {
			break
		}
		fmt.Fprintf(&b, "%s  %s\n", mib(s.Bytes), s.Name)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
