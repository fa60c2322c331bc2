package exepages

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The pclntab is a third of a Go executable and mostly resident. debug/gosym reads functions from it
// but does not say where in it each function's records lie, so this file reads the layout the Go
// runtime uses since Go 1.20 (runtime/symtab.go: pcHeader, functab, _func). Any other layout is an
// error rather than a wrong split.

const go120Magic = 0xfffffff1

type pclnHeader struct {
	nfunc          uint64
	textStart      uint64 // runtime.text: not in the header since Go 1.26, set by the caller
	funcnameOffset uint64
	pctabOffset    uint64
	pclnOffset     uint64
}

func parseHeader(data []byte) (pclnHeader, error) {
	le := binary.LittleEndian
	if len(data) < 72 {
		return pclnHeader{}, errors.New(".gopclntab is too short for a header")
	}
	if magic := le.Uint32(data); magic != go120Magic || data[7] != 8 {
		return pclnHeader{}, fmt.Errorf(".gopclntab magic %#x, pointer size %d: only the layout of Go 1.20 and later on 64-bit machines is read", magic, data[7])
	}
	h := pclnHeader{
		nfunc:          le.Uint64(data[8:]),
		funcnameOffset: le.Uint64(data[32:]),
		pctabOffset:    le.Uint64(data[56:]),
		pclnOffset:     le.Uint64(data[64:]),
	}
	if h.pclnOffset+8*(h.nfunc+1) > uint64(len(data)) {
		return pclnHeader{}, errors.New(".gopclntab header points past its end")
	}
	return h, nil
}

// records returns, for each function, the spans of its _func record, its name, its pc-value tables and
// its funcdata (stack maps, inlining trees), at the addresses of the section loaded at base. byEntry
// gives each function's package by entry address. gofunc is the go:func.* symbol the funcdata offsets
// count from (zero size when the executable has no symbols: the funcdata stay unattributed then). A
// funcdata's length is not recorded, so each runs to the next one's start.
func (h pclnHeader) records(data []byte, base uint64, byEntry map[uint64]string, gofunc elf.Symbol) ([]span, error) {
	le := binary.LittleEndian
	ftab := data[h.pclnOffset:]
	// _func: entryOff, nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset (uint32 each),
	// startLine int32, funcID, flag, _, nfuncdata (uint8 each), then npcdata and nfuncdata uint32s.
	const funcSize = 44
	spans := make([]span, 0, 6*h.nfunc)
	funcdata := map[uint64]string{} // offset in go:func.* -> the package of the first function using it
	for i := range h.nfunc {
		entryOff := uint64(le.Uint32(ftab[8*i:]))
		funcOff := uint64(le.Uint32(ftab[8*i+4:]))
		if funcOff+funcSize > uint64(len(ftab)) {
			return nil, fmt.Errorf(".gopclntab: function %d's record lies past the table's end", i)
		}
		rec := ftab[funcOff:]
		if uint64(le.Uint32(rec)) != entryOff {
			return nil, fmt.Errorf(".gopclntab: function %d's record does not name its entry: not the Go 1.20 layout", i)
		}
		pkg, ok := byEntry[h.textStart+entryOff]
		if !ok {
			return nil, fmt.Errorf(".gopclntab: no function at entry %#x", h.textStart+entryOff)
		}
		npcdata, nfuncdata := uint64(le.Uint32(rec[28:])), uint64(rec[43])
		size := funcSize + 4*npcdata + 4*nfuncdata
		if funcOff+size > uint64(len(ftab)) {
			return nil, fmt.Errorf(".gopclntab: function %d's record lies past the table's end", i)
		}
		at := base + h.pclnOffset + funcOff
		spans = append(spans, span{at, at + size, pkg})

		name := h.funcnameOffset + uint64(le.Uint32(rec[4:]))
		if name >= uint64(len(data)) {
			return nil, fmt.Errorf(".gopclntab: function %d's name lies past the section's end", i)
		}
		spans = append(spans, span{base + name, base + name + cstrLen(data[name:]) + 1, pkg})

		tables := []uint64{uint64(le.Uint32(rec[16:])), uint64(le.Uint32(rec[20:])), uint64(le.Uint32(rec[24:]))}
		for k := range npcdata {
			tables = append(tables, uint64(le.Uint32(rec[funcSize+4*k:])))
		}
		for k := range nfuncdata {
			if off := le.Uint32(rec[funcSize+4*npcdata+4*k:]); off != ^uint32(0) {
				if _, ok := funcdata[uint64(off)]; !ok {
					funcdata[uint64(off)] = pkg
				}
			}
		}
		for _, t := range tables {
			if t == 0 { // no table
				continue
			}
			off := h.pctabOffset + t
			if off >= uint64(len(data)) {
				return nil, fmt.Errorf(".gopclntab: function %d's table lies past the section's end", i)
			}
			spans = append(spans, span{base + off, base + off + pcvalueLen(data[off:]), pkg})
		}
	}
	if gofunc.Size > 0 {
		starts := make([]uint64, 0, len(funcdata))
		for off := range funcdata {
			starts = append(starts, off)
		}
		slices.Sort(starts)
		for i, off := range starts {
			end := gofunc.Size
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			if off < end {
				spans = append(spans, span{gofunc.Value + off, gofunc.Value + end, funcdata[off]})
			}
		}
	}
	return spans, nil
}

func cstrLen(b []byte) uint64 {
	for i, c := range b {
		if c == 0 {
			return uint64(i)
		}
	}
	return uint64(len(b))
}

// pcvalueLen is the length of one pc-value table: pairs of varints (value delta, pc delta), ended by a
// value delta of zero after the first pair.
func pcvalueLen(b []byte) uint64 {
	var n int
	for first := true; ; first = false {
		v, k := binary.Uvarint(b[n:])
		if k <= 0 {
			return uint64(len(b))
		}
		n += k
		if v == 0 && !first {
			return uint64(n)
		}
		_, k = binary.Uvarint(b[n:])
		if k <= 0 {
			return uint64(len(b))
		}
		n += k
	}
}
