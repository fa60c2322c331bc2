package bpf

import (
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"
)

// TestInstructionEncoding holds each builder to the encoding in the kernel's instruction-set
// documentation (Documentation/bpf/standardization/instruction-set.rst), written out by hand for a
// little-endian machine.
func TestInstructionEncoding(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the expected bytes are written for a little-endian machine")
	}
	tests := []struct {
		name string
		ins  Instruction
		want string // hex, one slot per 16 digits
	}{
		{"mov r0, 0", Mov.Imm(R0, 0), "b700000000000000"},
		{"mov r6, r1", Mov.Reg(R6, R1), "bf16000000000000"},
		{"add r2, -4", Add.Imm(R2, -4), "07020000fcffffff"},
		{"add r0, r1", Add.Reg(R0, R1), "0f10000000000000"},
		{"sub r0, r8", Sub.Reg(R0, R8), "1f80000000000000"},
		{"and r1, 0xff", And.Imm(R1, 0xff), "57010000ff000000"},
		{"div r1, 1000", Div.Imm(R1, 1000), "37010000e8030000"},
		{"rsh r1, 16", RSh.Imm(R1, 16), "7701000010000000"},
		{"lsh r1, 3", LSh.Imm(R1, 3), "6701000003000000"},
		{"ldxdw r1, [r6+24]", LoadMem(R1, R6, 24, DWord), "7961180000000000"},
		{"ldxw r1, [r1+8]", LoadMem(R1, R1, 8, Word), "6111080000000000"},
		{"stxw [r10-4], r1", StoreMem(RFP, -4, R1, Word), "631afcff00000000"},
		{"stxdw [r10-16], r0", StoreMem(RFP, -16, R0, DWord), "7b0af0ff00000000"},
		{"lock add [r6+200], r8", AtomicAdd(R6, 200, R8, DWord), "db86c80000000000"},
		{"call ktime_get_ns", Call(FnKtimeGetNs), "8500000005000000"},
		{"call map_lookup_elem", Call(FnMapLookupElem), "8500000001000000"},
		{"lddw r1, map fd 7", LoadMapFD(R1, 7), "1811000007000000" + "0000000000000000"},
		{"exit", Exit(), "9500000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Instructions{tt.ins}.Assemble()
			if err != nil {
				t.Fatal(err)
			}
			if hex.EncodeToString(got) != tt.want {
				t.Errorf("encoded %x, want %s", got, tt.want)
			}
		})
	}
}

// TestJumpOffsets: a jump's offset counts slots from the instruction after it, and a 64-bit load
// takes two.
func TestJumpOffsets(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the expected bytes are written for a little-endian machine")
	}
	prog := Instructions{
		JEq.Imm(R1, 0, "out"),                // slot 0 → out at slot 5: +4
		LoadMapFD(R1, 3),                     // slots 1–2
		JNE.Imm(R0, 0, "self").Label("self"), // slot 3 → itself: -1
		Mov.Imm(R2, 1).Label("back2"),        // slot 4
		Mov.Imm(R0, 0).Label("out"),          // slot 5
		JLT.Imm(R2, 5, "back2"),              // slot 6 → slot 4: -3
		JLE.Imm(R2, 5, "out"),                // slot 7 → slot 5: -3
		Exit(),
	}
	got, err := prog.Assemble()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"1501040000000000",
		"1811000003000000", "0000000000000000",
		"5500ffff00000000",
		"b702000001000000",
		"b700000000000000",
		"a502fdff05000000",
		"b502fdff05000000",
		"9500000000000000",
	}, "")
	if hex.EncodeToString(got) != want {
		t.Errorf("assembled\n%x\nwant\n%s", got, want)
	}
}

func TestAssembleRefusesBadLabels(t *testing.T) {
	tests := []struct {
		name string
		prog Instructions
		want string
	}{
		{"unknown label", Instructions{JEq.Imm(R1, 0, "nowhere"), Exit()}, `label "nowhere", which no instruction has`},
		{"duplicate label", Instructions{Mov.Imm(R0, 0).Label("x"), Exit().Label("x")}, `label "x" marks two instructions`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.prog.Assemble()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Assemble() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestAssembleRefusesJumpsOutOfReach(t *testing.T) {
	prog := Instructions{JEq.Imm(R1, 0, "far")}
	for range 1 << 15 {
		prog = append(prog, Mov.Imm(R0, 0))
	}
	prog = append(prog, Exit().Label("far"))
	if _, err := prog.Assemble(); err == nil || !strings.Contains(err.Error(), "more than a jump can reach") {
		t.Errorf("a jump over 32768 slots assembled: %v", err)
	}
	// One slot less is the farthest a jump reaches.
	prog = append(prog[:1], prog[2:]...)
	if _, err := prog.Assemble(); err != nil {
		t.Errorf("a jump over 32767 slots: %v", err)
	}
}
