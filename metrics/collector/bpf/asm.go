package bpf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Reg is one of the eBPF machine's eleven registers.
type Reg uint8

// The registers: R0 holds return values, R1–R5 arguments (clobbered by calls), R6–R9 survive calls,
// RFP is the read-only frame pointer of the program's 512-byte stack.
const (
	R0 Reg = iota
	R1
	R2
	R3
	R4
	R5
	R6
	R7
	R8
	R9
	RFP
)

// Size is the width of a memory access.
type Size uint8

// The access widths the run-queue programs use, as the opcode encodes them.
const (
	Word  Size = 0x00
	DWord Size = 0x18
)

// Helper is a kernel helper function's number (include/uapi/linux/bpf.h, enum bpf_func_id).
type Helper int32

// The helpers the run-queue programs call.
const (
	FnMapLookupElem Helper = 1
	FnMapUpdateElem Helper = 2
	FnMapDeleteElem Helper = 3
	FnKtimeGetNs    Helper = 5
)

// Instruction classes, sources and modes of the opcode byte.
const (
	classLD    = 0x00
	classLDX   = 0x01
	classSTX   = 0x03
	classJMP   = 0x05
	classALU64 = 0x07

	srcK = 0x00 // immediate operand
	srcX = 0x08 // register operand

	modeIMM    = 0x00
	modeMEM    = 0x60
	modeATOMIC = 0xc0

	jmpCall = 0x80
	jmpExit = 0x90

	pseudoMapFD = 1 // src of a 64-bit load: the immediate is a map's file descriptor
	atomicAdd   = 0x00
)

// ALUOp is a 64-bit arithmetic operation.
type ALUOp uint8

// The 64-bit ALU operations the run-queue programs use (the opcode's top four bits).
const (
	Add ALUOp = 0x00
	Sub ALUOp = 0x10
	Div ALUOp = 0x30
	And ALUOp = 0x50
	LSh ALUOp = 0x60
	RSh ALUOp = 0x70
	Mov ALUOp = 0xb0
)

// Imm is dst = dst op imm (Mov: dst = imm).
func (op ALUOp) Imm(dst Reg, imm int32) Instruction {
	return Instruction{op: classALU64 | srcK | uint8(op), dst: dst, imm: int64(imm)}
}

// Reg is dst = dst op src (Mov: dst = src).
func (op ALUOp) Reg(dst, src Reg) Instruction {
	return Instruction{op: classALU64 | srcX | uint8(op), dst: dst, src: src}
}

// JumpOp is a conditional jump, taken when the comparison (unsigned) holds.
type JumpOp uint8

// The conditional jumps the run-queue programs use.
const (
	JEq JumpOp = 0x10
	JNE JumpOp = 0x50
	JLT JumpOp = 0xa0
	JLE JumpOp = 0xb0
)

// Imm jumps to the instruction labelled target when dst op imm.
func (op JumpOp) Imm(dst Reg, imm int32, target string) Instruction {
	return Instruction{op: classJMP | srcK | uint8(op), dst: dst, imm: int64(imm), target: target}
}

// LoadMem is dst = *(size *)(src + off).
func LoadMem(dst, src Reg, off int16, size Size) Instruction {
	return Instruction{op: classLDX | modeMEM | uint8(size), dst: dst, src: src, off: off}
}

// StoreMem is *(size *)(dst + off) = src.
func StoreMem(dst Reg, off int16, src Reg, size Size) Instruction {
	return Instruction{op: classSTX | modeMEM | uint8(size), dst: dst, src: src, off: off}
}

// AtomicAdd is *(size *)(dst + off) += src, atomically (Word or DWord).
func AtomicAdd(dst Reg, off int16, src Reg, size Size) Instruction {
	return Instruction{op: classSTX | modeATOMIC | uint8(size), dst: dst, src: src, off: off, imm: atomicAdd}
}

// LoadMapFD puts the map with file descriptor fd in dst, as the helpers expect their map argument. It
// takes two instruction slots.
func LoadMapFD(dst Reg, fd int) Instruction {
	return Instruction{op: classLD | modeIMM | uint8(DWord), dst: dst, src: pseudoMapFD, imm: int64(fd)}
}

// Call calls a kernel helper: arguments in R1–R5, result in R0.
func Call(fn Helper) Instruction {
	return Instruction{op: classJMP | jmpCall, imm: int64(fn)}
}

// Exit returns R0 to the kernel.
func Exit() Instruction {
	return Instruction{op: classJMP | jmpExit}
}

// Instruction is one eBPF instruction before assembly: jumps name their target by label.
type Instruction struct {
	op       uint8
	dst, src Reg
	off      int16
	imm      int64
	label    string // this instruction is the target of jumps to label
	target   string // the label a jump goes to
}

// Label marks the instruction as the target of jumps to name.
func (i Instruction) Label(name string) Instruction {
	i.label = name
	return i
}

// wide reports a 64-bit immediate load, which takes two slots.
func (i Instruction) wide() bool { return i.op == classLD|modeIMM|uint8(DWord) }

// Instructions is a program.
type Instructions []Instruction

// Assemble encodes the program as the kernel loads it, resolving every jump's label into a relative
// offset. An unknown or duplicate label, or a jump too far for its 16-bit offset, is an error.
func (p Instructions) Assemble() ([]byte, error) {
	slots := make([]int, len(p)+1)
	labels := map[string]int{}
	for i, ins := range p {
		if ins.label != "" {
			if _, dup := labels[ins.label]; dup {
				return nil, fmt.Errorf("label %q marks two instructions", ins.label)
			}
			labels[ins.label] = slots[i]
		}
		slots[i+1] = slots[i] + 1
		if ins.wide() {
			slots[i+1]++
		}
	}
	out := make([]byte, 0, 8*slots[len(p)])
	for i, ins := range p {
		off := ins.off
		if ins.target != "" {
			to, ok := labels[ins.target]
			if !ok {
				return nil, fmt.Errorf("instruction %d jumps to label %q, which no instruction has", i, ins.target)
			}
			rel := to - slots[i] - 1
			if rel < math.MinInt16 || rel > math.MaxInt16 {
				return nil, fmt.Errorf("instruction %d jumps %d slots to %q, more than a jump can reach", i, rel, ins.target)
			}
			off = int16(rel)
		}
		out = encode(out, ins.op, ins.dst, ins.src, off, int32(ins.imm))
		if ins.wide() {
			out = encode(out, 0, 0, 0, 0, int32(ins.imm>>32))
		}
	}
	return out, nil
}

// encode appends one 8-byte slot as struct bpf_insn lays it out: opcode, the two registers' 4-bit
// fields, 16-bit offset, 32-bit immediate, in the machine's byte order. The register fields are C
// bitfields, so the destination is the low nibble on little-endian machines and the high one on
// big-endian machines.
func encode(b []byte, op uint8, dst, src Reg, off int16, imm int32) []byte {
	regs := uint8(dst)&0x0f | uint8(src)<<4
	if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
		regs = uint8(dst)<<4 | uint8(src)&0x0f
	}
	b = append(b, op, regs)
	b = binary.NativeEndian.AppendUint16(b, uint16(off))
	return binary.NativeEndian.AppendUint32(b, uint32(imm))
}
