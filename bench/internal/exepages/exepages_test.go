package exepages

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// exeRSS sums smaps' Rss of this process's mappings of its executable, in bytes.
func exeRSS(t *testing.T) int64 {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sum int64
	mine := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") {
			mine = len(fields) >= 6 && fields[5] == exe
			continue
		}
		if mine && fields[0] == "Rss:" {
			kib, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			sum += kib << 10
		}
	}
	return sum
}

func TestMeasureOwnProcess(t *testing.T) {
	before := exeRSS(t)
	rep, err := Measure(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	after := exeRSS(t)
	// Measuring faults in pages of its own code: the count lies between the two readings of smaps.
	if rep.ResidentBytes < before || rep.ResidentBytes > after {
		t.Errorf("resident executable pages %d bytes; smaps says %d before the measurement and %d after", rep.ResidentBytes, before, after)
	}
	var sum int64
	for _, b := range rep.ByModule {
		sum += b
	}
	if sum != rep.ResidentBytes {
		t.Errorf("the modules' shares add up to %d bytes, not the %d resident", sum, rep.ResidentBytes)
	}
	sum = 0
	for _, b := range rep.ByPackage {
		sum += b
	}
	if sum != rep.ResidentBytes {
		t.Errorf("the packages' shares add up to %d bytes, not the %d resident", sum, rep.ResidentBytes)
	}
	if b, ok := rep.ByPackage[""]; ok {
		t.Errorf("%d bytes charged to a package without a name; want them under %s", b, Unattributed)
	}
	// This package's code ran, and so did the runtime's: both own resident pages.
	for _, m := range []string{Std, "github.com/tandemkit/tandem"} {
		if rep.ByModule[m] < pageSize {
			t.Errorf("module %s has %d resident bytes, want at least a page: %v", m, rep.ByModule[m], rep.Sorted())
		}
	}
	if s := rep.Sorted(); len(s) < 2 || s[0].Bytes < s[1].Bytes {
		t.Errorf("Sorted() is not largest first: %v", s)
	}
}

// TestSpansFindOwnFunctions checks the function table is read at the right addresses: the code and the
// pclntab records of a function of this package are charged to it. go test links its binaries without a
// symbol table, as -ldflags=-s does, so this reads runtime.text as the start of .text; bench/crilatency
// measures executables with their symbols.
func TestSpansFindOwnFunctions(t *testing.T) {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	spans, err := packageSpans(f)
	if err != nil {
		t.Fatal(err)
	}
	const self = "github.com/tandemkit/tandem/bench/internal/exepages"
	// A span starts exactly at each function's entry, charged to its package.
	for _, fn := range []struct {
		f   any
		pkg string
	}{{split, self}, {strings.Cut, "strings"}, {binary.AppendUvarint, "encoding/binary"}} {
		pc, pkg := uint64(reflect.ValueOf(fn.f).Pointer()), fn.pkg
		var owners []string
		for _, s := range spans {
			if s.lo == pc {
				owners = append(owners, s.pkg)
			}
		}
		if len(owners) != 1 || owners[0] != pkg {
			t.Errorf("spans starting at the entry %#x of a function of %s: %v, want one of %s", pc, pkg, owners, pkg)
		}
	}
	// Each function has its _func record, its name and at least its pcsp and pcln tables.
	pcln := f.Section(".gopclntab")
	records := 0
	for _, s := range spans {
		if s.pkg == self && s.lo >= pcln.Addr && s.hi <= pcln.Addr+pcln.Size {
			records++
		}
	}
	if records < 4 {
		t.Errorf("%d pclntab spans charged to this package, want a few per function", records)
	}
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pages []uint64
		spans []span
		want  map[string]int64
	}{
		{
			name:  "one package covers the page",
			pages: []uint64{0x1000},
			spans: []span{{0x0, 0x3000, "a"}},
			want:  map[string]int64{"a": 4096},
		},
		{
			name:  "two packages and a gap",
			pages: []uint64{0x1000},
			spans: []span{{0x1000, 0x1800, "a"}, {0x1800, 0x1c00, "b"}},
			want:  map[string]int64{"a": 2048, "b": 1024, Unattributed: 1024},
		},
		{
			name:  "no span: all unattributed",
			pages: []uint64{0x5000},
			spans: []span{{0x1000, 0x2000, "a"}},
			want:  map[string]int64{Unattributed: 4096},
		},
		{
			name:  "overlapping spans share the page",
			pages: []uint64{0x1000},
			spans: []span{{0x1000, 0x2000, "a"}, {0x1000, 0x2000, "b"}},
			want:  map[string]int64{"a": 2048, "b": 2048},
		},
		{
			name:  "a long span that starts pages earlier still counts",
			pages: []uint64{0x4000},
			spans: []span{{0x0, 0x8000, "a"}, {0x2000, 0x2100, "c"}, {0x4000, 0x4000, "empty"}},
			want:  map[string]int64{"a": 4096},
		},
		{
			name:  "resident pages only",
			pages: nil,
			spans: []span{{0x0, 0x8000, "a"}},
			want:  map[string]int64{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := split(tc.pages, tc.spans)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("split = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPackageOf(t *testing.T) {
	for name, want := range map[string]string{
		"runtime.mallocgc":                                               "runtime",
		"k8s.io/api/core/v1.(*Pod).Marshal":                              "k8s.io/api/core/v1",
		"github.com/tandemkit/tandem/proxy.(*Server).handle.func1":       "github.com/tandemkit/tandem/proxy",
		"slices.SortFunc[go.shape.[]string,go.shape.string]":             "slices",
		"google.golang.org/grpc/internal/transport.(*http2Client).Write": "google.golang.org/grpc/internal/transport",
		"main.main":                           "main",
		"type:*k8s.io/api/core/v1.Pod":        "",
		"go:func.*":                           "",
		"go:string.*":                         "",
		"type:.eq.k8s.io/api/core/v1.PodSpec": "k8s.io/api/core/v1",
		"type:.eq.*[4]google.golang.org/grpc/internal/transport.x":  "google.golang.org/grpc/internal/transport",
		"type:.hash.net/netip.Addr":                                 "net/netip",
		"type:.eq.struct { a int; b string }":                       "",
		"type:.eq.[2]interface {}":                                  "",
		"go:(*struct { *net/http.response; io.ReaderFrom }).Header": "",
	} {
		if got := packageOf(name); got != want {
			t.Errorf("packageOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestModules(t *testing.T) {
	moduleOf := modules("github.com/tandemkit/tandem", []string{"golang.org/x/sys", "google.golang.org/grpc", "google.golang.org/grpc/security/advancedtls"})
	for pkg, want := range map[string]string{
		"github.com/tandemkit/tandem/bench/internal/exepages":  "github.com/tandemkit/tandem",
		"github.com/tandemkit/tandem":                          "github.com/tandemkit/tandem",
		"main":                                                 "github.com/tandemkit/tandem",
		"golang.org/x/sys/unix":                                "golang.org/x/sys",
		"golang.org/x/sysfoo":                                  Std, // a path prefix is not a module prefix
		"google.golang.org/grpc/internal/transport":            "google.golang.org/grpc",
		"google.golang.org/grpc/security/advancedtls/internal": "google.golang.org/grpc/security/advancedtls",
		"runtime":                             Std,
		"vendor/golang.org/x/net/http2/hpack": Std,
	} {
		if got := moduleOf(pkg); got != want {
			t.Errorf("module of %s = %q, want %q", pkg, got, want)
		}
	}
}

func TestModuleOfReadsTheExecutable(t *testing.T) {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer exe.Close()
	moduleOf, err := moduleOf(exe)
	if err != nil {
		t.Fatal(err)
	}
	if got := moduleOf("github.com/tandemkit/tandem/proxy"); got != "github.com/tandemkit/tandem" {
		t.Errorf("the test binary's main module is %q, want github.com/tandemkit/tandem", got)
	}
}

func TestPcvalueLen(t *testing.T) {
	enc := func(vals ...uint64) []byte {
		var b []byte
		for _, v := range vals {
			b = binary.AppendUvarint(b, v)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want uint64
	}{
		// A first value delta of zero is a real entry; the table ends at the next zero value delta.
		{"first delta zero", append(enc(0, 5, 2, 300, 0), 0xff, 0xff), 6},
		{"two entries", append(enc(4, 10, 6, 20, 0), 7, 7, 7), 5},
		{"runs to the end unterminated", enc(4, 10), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pcvalueLen(tc.b); got != tc.want {
				t.Errorf("pcvalueLen(% x) = %d, want %d", tc.b, got, tc.want)
			}
		})
	}
}

func TestParseHeaderRefusesOtherLayouts(t *testing.T) {
	data := make([]byte, 128)
	binary.LittleEndian.PutUint32(data, 0xfffffff0) // Go 1.18's magic
	data[7] = 8
	if _, err := parseHeader(data); err == nil || !strings.Contains(err.Error(), "Go 1.20") {
		t.Errorf("parseHeader accepted a Go 1.18 pclntab: err = %v", err)
	}
	if _, err := parseHeader(data[:10]); err == nil {
		t.Error("parseHeader accepted a truncated header")
	}
}

// TestRecordsRefuseATruncatedTable checks a damaged pclntab is an error, not a panic or a wrong split.
func TestRecordsRefuseATruncatedTable(t *testing.T) {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := f.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := parseHeader(data)
	if err != nil {
		t.Fatal(err)
	}
	// Keep the function table whole, cut the records after it: every function has an entry, so the
	// byEntry lookup is not what fails.
	cut := data[:hdr.pclnOffset+8*(hdr.nfunc+1)+64]
	byEntry := map[uint64]string{}
	for i := range hdr.nfunc {
		byEntry[hdr.textStart+uint64(binary.LittleEndian.Uint32(data[hdr.pclnOffset+8*i:]))] = "p"
	}
	if _, err := hdr.records(cut, 0, byEntry, elf.Symbol{}); err == nil {
		t.Error("records read a pclntab cut short without an error")
	}
	if _, err := hdr.records(data, 0, byEntry, elf.Symbol{}); err != nil {
		t.Errorf("records refused the whole pclntab: %v", err)
	}
}
