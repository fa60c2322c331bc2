// Package exepages splits the resident pages of a running Go program's executable by the Go module
// whose code and tables fill them. A Go node agent's VmRSS is mostly its executable: the kernel maps
// the pages a program touches at start and, from the page cache, up to 16 around each one, so which
// libraries are linked decides much of the figure, whether their code runs or not. This package says
// how much each one accounts for, which is what a decision to drop a library needs.
//
// The text is split by function, with the function table of the executable's pclntab (debug/gosym);
// the pclntab itself by the function each of its records and tables describes; other sections by the
// ELF symbol table when there is one (executables built with -ldflags=-s have none). What no symbol or
// record covers (merged strings and type data in .rodata, padding) is counted as Unattributed.
package exepages

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Unattributed names the bytes of resident pages that no function, pclntab record or symbol covers.
const Unattributed = "(unattributed)"

// Std names the standard library and the runtime.
const Std = "std"

const pageSize = 4096

// Report is where one process's resident executable pages come from.
type Report struct {
	// ResidentBytes is every resident page of the process's mappings of its executable file.
	ResidentBytes int64 `json:"residentBytes"`
	// ByModule splits ResidentBytes by Go module path (Std for the standard library), each page shared
	// among the modules in proportion to the bytes of it their functions, pclntab records and symbols
	// take.
	ByModule map[string]int64 `json:"byModule"`
	// ByPackage is the same split by package (Unattributed as in ByModule).
	ByPackage map[string]int64 `json:"byPackage"`
}

// Share is one module's or package's part of a Report.
type Share struct {
	Name  string
	Bytes int64
}

// Sorted returns the modules, largest first.
func (r Report) Sorted() []Share { return sorted(r.ByModule) }

// SortedPackages returns the packages, largest first.
func (r Report) SortedPackages() []Share { return sorted(r.ByPackage) }

func sorted(bytes map[string]int64) []Share {
	out := make([]Share, 0, len(bytes))
	for m, b := range bytes {
		out = append(out, Share{m, b})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// span is a range of addresses, as the running process sees them, owned by one package.
type span struct {
	lo, hi uint64
	pkg    string
}

// Measure reads which pages of pid's executable are resident (/proc/PID/pagemap, which needs the right
// to ptrace pid) and splits them by module.
func Measure(pid int) (Report, error) {
	// One open file for everything read from the executable: the path, a magic link, could be
	// replaced between two opens by an exec.
	exe := fmt.Sprintf("/proc/%d/exe", pid)
	file, err := os.Open(exe)
	if err != nil {
		return Report{}, fmt.Errorf("open the executable of pid %d: %w", pid, err)
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return Report{}, fmt.Errorf("read the executable of pid %d: %w", pid, err)
	}
	fi, err := file.Stat()
	if err != nil {
		return Report{}, fmt.Errorf("stat the executable of pid %d: %w", pid, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return Report{}, fmt.Errorf("stat the executable of pid %d: no device and inode on this system", pid)
	}
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return Report{}, fmt.Errorf("read the mappings of pid %d: %w", pid, err)
	}
	mappings, err := exeMappings(maps, unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	if err != nil {
		return Report{}, err
	}
	if len(mappings) == 0 {
		return Report{}, fmt.Errorf("pid %d maps nothing of its executable %s", pid, exe)
	}
	bias, err := loadBias(f, mappings)
	if err != nil {
		return Report{}, err
	}
	spans, err := packageSpans(f)
	if err != nil {
		return Report{}, err
	}
	modules, err := moduleOf(file)
	if err != nil {
		return Report{}, fmt.Errorf("pid %d: %w", pid, err)
	}

	pagemap, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return Report{}, fmt.Errorf("open the page map of pid %d (root or ptrace rights needed): %w", pid, err)
	}
	defer pagemap.Close()
	var resident []uint64 // page addresses, as the ELF file numbers them
	for _, m := range mappings {
		present, err := residentPages(pagemap, m.lo, m.hi)
		if err != nil {
			return Report{}, fmt.Errorf("read the page map of pid %d: %w", pid, err)
		}
		for _, a := range present {
			resident = append(resident, a-bias)
		}
	}
	rep := Report{ResidentBytes: int64(len(resident)) * pageSize, ByModule: map[string]int64{}, ByPackage: split(resident, spans)}
	for pkg, b := range rep.ByPackage {
		rep.ByModule[modules(pkg)] += b
	}
	return rep, nil
}

// mapping is one mapping of the executable file: its addresses and its offset in the file.
type mapping struct{ lo, hi, off uint64 }

// exeMappings picks the mappings of the file (major:minor, inode) from /proc/PID/maps.
func exeMappings(maps []byte, major, minor uint32, ino uint64) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		// 00400000-00e99000 r-xp 00000000 fe:00 9977888   /path
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("unexpected line in /proc/PID/maps: %q", sc.Text())
		}
		if f[4] != strconv.FormatUint(ino, 10) || f[3] != fmt.Sprintf("%02x:%02x", major, minor) {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			return nil, fmt.Errorf("unexpected address range in /proc/PID/maps: %q", f[0])
		}
		var m mapping
		var err1, err2, err3 error
		m.lo, err1 = strconv.ParseUint(lo, 16, 64)
		m.hi, err2 = strconv.ParseUint(hi, 16, 64)
		m.off, err3 = strconv.ParseUint(f[2], 16, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("unexpected line in /proc/PID/maps: %q: %w", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// loadBias is how far the process mapped the executable from the addresses its ELF headers give: zero
// for a Go executable built as usual, the load address for a position-independent one.
func loadBias(f *elf.File, mappings []mapping) (uint64, error) {
	if f.Type == elf.ET_EXEC {
		return 0, nil
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off&^(pageSize-1) == mappings[0].off {
			return mappings[0].lo - p.Vaddr&^(pageSize-1), nil
		}
	}
	return 0, fmt.Errorf("no loadable segment of the executable starts at file offset %#x", mappings[0].off)
}

// residentPages returns the pages of [lo, hi) that are in memory.
func residentPages(pagemap *os.File, lo, hi uint64) ([]uint64, error) {
	n := (hi - lo) / pageSize
	buf := make([]byte, 8*n)
	if _, err := pagemap.ReadAt(buf, int64(lo/pageSize*8)); err != nil {
		return nil, err
	}
	var out []uint64
	for i := range n {
		if binary.LittleEndian.Uint64(buf[8*i:])&(1<<63) != 0 {
			out = append(out, lo+i*pageSize)
		}
	}
	return out, nil
}

// split shares each page among the packages whose spans cover it, by bytes; the bytes no span covers
// go to Unattributed. Spans may overlap (pclntab tables shared by functions): each counts its bytes.
func split(pages []uint64, spans []span) map[string]int64 {
	sort.Slice(spans, func(i, j int) bool { return spans[i].lo < spans[j].lo })
	// maxHi[i] is the largest end among spans[:i+1]: spans ending before a page are skipped by it.
	maxHi := make([]uint64, len(spans))
	var m uint64
	for i, s := range spans {
		m = max(m, s.hi)
		maxHi[i] = m
	}
	out := map[string]int64{}
	for _, p := range pages {
		end := p + pageSize
		first := sort.Search(len(spans), func(i int) bool { return maxHi[i] > p })
		covered := map[string]uint64{}
		var total uint64
		for i := first; i < len(spans) && spans[i].lo < end; i++ {
			lo, hi := max(spans[i].lo, p), min(spans[i].hi, end)
			if hi > lo {
				covered[spans[i].pkg] += hi - lo
				total += hi - lo
			}
		}
		if total == 0 {
			out[Unattributed] += pageSize
			continue
		}
		// The part of the page no span covers is Unattributed; overlapping spans can cover more than
		// the page, and then share all of it.
		free := uint64(0)
		if total < pageSize {
			free = pageSize - total
			out[Unattributed] += int64(free)
		}
		var given uint64
		pkgs := make([]string, 0, len(covered))
		for k := range covered {
			pkgs = append(pkgs, k)
		}
		sort.Strings(pkgs)
		for i, k := range pkgs {
			share := (pageSize - free) * covered[k] / total
			if i == len(pkgs)-1 {
				share = pageSize - free - given // rounding: the page is counted whole
			}
			given += share
			out[k] += int64(share)
		}
	}
	return out
}

// runtimeText is where the function table's offsets count from: the runtime.text symbol, which is the
// start of .text unless a C linker put code before it (cgo). Executables built with -ldflags=-s have no
// symbol to say it, and the pclntab has not held it since Go 1.26; the start of .text is taken then.
func runtimeText(text *elf.Section, syms []elf.Symbol) uint64 {
	for _, s := range syms {
		if s.Name == "runtime.text" {
			return s.Value
		}
	}
	return text.Addr
}

// packageSpans lists what each package owns in the executable: its functions' code, their pclntab
// records and tables, and the symbols of other sections.
func packageSpans(f *elf.File) ([]span, error) {
	pcln := f.Section(".gopclntab")
	text := f.Section(".text")
	if pcln == nil || text == nil {
		return nil, errors.New("not a Go executable: no .gopclntab or .text section")
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, fmt.Errorf("read .gopclntab: %w", err)
	}
	hdr, err := parseHeader(data)
	if err != nil {
		return nil, err
	}
	syms, err := f.Symbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("read the ELF symbols: %w", err)
	}
	hdr.textStart = runtimeText(text, syms)
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, hdr.textStart))
	if err != nil {
		return nil, fmt.Errorf("read the function table: %w", err)
	}
	if n := len(table.Funcs); n == 0 || table.Funcs[n-1].End > text.Addr+text.Size {
		return nil, errors.New("the function table does not fit in .text: runtime.text cannot be told (a stripped executable linked with cgo?)")
	}
	var spans []span
	byEntry := make(map[uint64]string, len(table.Funcs))
	for _, fn := range table.Funcs {
		pkg := packageOf(fn.Name)
		if pkg == "" {
			pkg = Unattributed // compiler-written code of no package: methods of struct literals
		}
		byEntry[fn.Entry] = pkg
		spans = append(spans, span{fn.Entry, fn.End, pkg})
	}
	var gofunc elf.Symbol
	for _, s := range syms {
		if s.Name == "go:func.*" {
			gofunc = s
		}
	}
	recs, err := hdr.records(data, pcln.Addr, byEntry, gofunc)
	if err != nil {
		return nil, err
	}
	spans = append(spans, recs...)
	for _, s := range syms {
		// The text is split by the function table above, which the symbol table would only repeat.
		if s.Size == 0 || s.Value >= text.Addr && s.Value < text.Addr+text.Size {
			continue
		}
		if pkg := packageOf(s.Name); pkg != "" {
			spans = append(spans, span{s.Value, s.Value + s.Size, pkg})
		}
	}
	return spans, nil
}

// packageOf is the import path of the package a symbol belongs to; empty for the linker's and
// compiler's own data (type descriptors, strings) and for code no package can be charged with. The
// equality and hash functions the compiler writes for a named type are charged to the type's package.
func packageOf(name string) string {
	for _, prefix := range []string{"type:.eq.", "type:.hash."} {
		if typ, ok := strings.CutPrefix(name, prefix); ok {
			typ = strings.TrimLeft(typ, "*[]0123456789")
			pkg := packageOf(typ)
			if strings.ContainsAny(pkg, " {}[]()*,;") {
				return "" // a type literal: struct { ... }, func(...)
			}
			return pkg
		}
	}
	if strings.HasPrefix(name, "type:") || strings.HasPrefix(name, "go:") {
		return ""
	}
	s := gosym.Sym{Name: name}
	return s.PackageName()
}

// moduleOf returns a function that maps a package to the module that provides it, from the build
// information in the executable.
func moduleOf(exe io.ReaderAt) (func(pkg string) string, error) {
	bi, err := buildinfo.Read(exe)
	if err != nil {
		return nil, fmt.Errorf("read the build information of the executable: %w", err)
	}
	deps := make([]string, 0, len(bi.Deps))
	for _, d := range bi.Deps {
		deps = append(deps, d.Path)
	}
	return modules(bi.Main.Path, deps), nil
}

// modules maps a package to the module among main and deps that provides it: the one whose path is
// the longest prefix of the package's, Std if none is.
func modules(main string, deps []string) func(pkg string) string {
	paths := append([]string{main}, deps...)
	// Longest first, so that a nested module wins over the one containing it.
	sort.Slice(paths, func(i, j int) bool { return len(paths[i]) > len(paths[j]) })
	return func(pkg string) string {
		switch pkg {
		case "main":
			return main
		case Unattributed:
			return Unattributed
		}
		for _, p := range paths {
			if p != "" && (pkg == p || strings.HasPrefix(pkg, p+"/")) {
				return p
			}
		}
		return Std
	}
}
