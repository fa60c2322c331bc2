package framework

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestBuildTagsMatchMakefile: the tests and benchmarks must measure the binaries `make build` ships.
func TestBuildTagsMatchMakefile(t *testing.T) {
	root, err := RepoRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^GOTAGS\s*\?=\s*(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile has no GOTAGS ?= line")
	}
	if got := strings.TrimSpace(string(m[1])); got != BuildTags {
		t.Errorf("Makefile GOTAGS = %q, framework.BuildTags = %q: make them the same", got, BuildTags)
	}
}

// TestNodeAgentsLinkNoCostlyPackages guards the node agents' memory against packages that cost
// every node more than they give:
//   - a package that calls reflect's Method or MethodByName with a name known only at run time
//     (text/template is the usual one) makes the linker keep every exported method of every type in
//     the binary, some 6 MB and 3 MiB of RSS on every node for tandem-proxy;
//   - cilium/ebpf's package initialisers keep about 1 MiB of tandem-proxy's executable resident, with
//     the run-queue source off as it is by default (metrics/collector/bpf says why it has its own
//     loader); the benchmarks may link it.
//
// A new dependency that brings one back fails here, naming who imports it.
func TestNodeAgentsLinkNoCostlyPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	root, err := RepoRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	banned := []string{"text/template", "golang.org/x/net/trace", "github.com/cilium/ebpf"}
	for _, cmd := range []string{"./cmd/tandem-proxy", "./cmd/tandem-nri"} {
		c := exec.Command(GoBinary(), "list", "-tags", BuildTags, "-deps", "-f", "{{.ImportPath}}:{{join .Imports \",\"}}", cmd)
		c.Dir = root
		out, err := c.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", cmd, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, imports, _ := strings.Cut(line, ":")
			for _, b := range banned {
				if slices.ContainsFunc(strings.Split(imports, ","), func(imp string) bool { return imp == b || strings.HasPrefix(imp, b+"/") }) {
					t.Errorf("%s links %s, imported by %s", cmd, b, pkg)
				}
			}
		}
	}
}
