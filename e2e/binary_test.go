//go:build e2e

package e2e

import (
	"debug/elf"
	"strings"
	"testing"
)

// TestNodeAgentBinaries checks the tandem-proxy and tandem-nri this tier runs are built as `make build`
// ships them to every node: static (no libc mapped beside them) and with the linker's dead-method
// elimination on. Nothing in Tandem calls the Kubernetes API types' SwaggerDoc methods; if one is in the
// binary, something reflective (text/template, through gRPC's request tracing without -tags grpcnotrace)
// made the linker keep every exported method of every type: 6 MB more executable, 3 MiB more RSS.
func TestNodeAgentBinaries(t *testing.T) {
	for name, build := range map[string]func() (string, error){"tandem-proxy": proxyBinary, "tandem-nri": nriBinary} {
		t.Run(name, func(t *testing.T) {
			bin, err := build()
			if err != nil {
				t.Fatal(err)
			}
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s is dynamically linked (it has an ELF interpreter): build it with CGO_ENABLED=0, as make build does", bin)
				}
			}
			syms, err := f.Symbols()
			if err != nil {
				t.Fatalf("%s: no symbol table to check: %v", bin, err)
			}
			var kept []string
			for _, s := range syms {
				if strings.HasSuffix(s.Name, ".SwaggerDoc") {
					kept = append(kept, s.Name)
				}
			}
			if len(kept) > 0 {
				t.Errorf("%s keeps %d unused SwaggerDoc methods (%s, ...): the linker's dead-method elimination is off; "+
					"build with -tags grpcnotrace and see TestNodeAgentsLinkNoCostlyPackages", bin, len(kept), kept[0])
			}
		})
	}
}
