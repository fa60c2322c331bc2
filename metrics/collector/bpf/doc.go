// Package bpf is the small eBPF loader the collector's run-queue source needs, written on
// golang.org/x/sys/unix: an assembler for the few instructions the source's programs use (with
// symbolic jump targets), hash and LRU hash maps (update, lookup, delete, key iteration and batch
// lookup-and-delete), tracepoint programs, and their attachment through a tracepoint perf event.
//
// Why not cilium/ebpf, which the design names: linking it cost every tandem-proxy about 1 MiB of
// resident memory, although the run-queue source is off by default (VmRSS right after start 21.7–22.1
// MiB with it, 20.8–21.0 with this package, four starts each; the executable 33.3 against 31.7 MB;
// docs/performance.md). That is not its code running but its package initialisers (ten packages, and
// debug/elf, debug/dwarf, internal/zstd and encoding/xml that it links): the kernel maps 64 KiB of
// the executable around each page an initialiser touches, and the function tables the runtime reads
// for it. This package links nothing but x/sys/unix, which tandem-proxy links anyway, and has no
// initialiser. The benchmarks, which may link what they like, keep cilium/ebpf for reading the
// kernel's BPF run-time statistics.
//
// It does no more than the run-queue source asks for: no ELF loading, no BTF, no CO-RE, no pinning, no
// program types other than tracepoints. A program that needs those should bring cilium/ebpf back in a
// process of its own.
package bpf
