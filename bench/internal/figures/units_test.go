package figures

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in           time.Duration
		want, signed string
	}{
		{in: 0, want: "0µs", signed: "+0µs"},
		{in: 850 * time.Microsecond, want: "850µs", signed: "+850µs"},
		{in: 1500 * time.Microsecond, want: "1.50ms", signed: "+1.50ms"},
		{in: 2500 * time.Millisecond, want: "2.50s", signed: "+2.50s"},
		{in: -1500 * time.Microsecond, want: "-1.50ms", signed: "-1.50ms"},
	}
	for _, tt := range tests {
		if got := Duration(tt.in); got != tt.want {
			t.Errorf("Duration(%v) = %q, want %q", tt.in, got, tt.want)
		}
		if got := Signed(tt.in); got != tt.signed {
			t.Errorf("Signed(%v) = %q, want %q", tt.in, got, tt.signed)
		}
	}
}

func TestCell(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   time.Duration
		unit time.Duration
		want string
	}{
		{in: 1234 * time.Microsecond, unit: time.Millisecond, want: "1.2"},
		{in: 123456 * time.Microsecond, unit: time.Millisecond, want: "123"},
		{in: -150 * time.Microsecond, unit: time.Microsecond, want: "-150"},
		{in: 15500 * time.Nanosecond, unit: time.Microsecond, want: "15.5"},
	}
	for _, tt := range tests {
		if got := Cell(tt.in, tt.unit); got != tt.want {
			t.Errorf("Cell(%v, %v) = %q, want %q", tt.in, tt.unit, got, tt.want)
		}
	}
}

func TestRatio(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v, base float64
		want    float64
		printed string
	}{
		{v: 3, base: 2, want: 1.5, printed: "1.50"},
		{v: 3, base: 0, want: 0, printed: "-"},
		{v: 3, base: -1, want: 0, printed: "-"},
	}
	for _, tt := range tests {
		got := Ratio(tt.v, tt.base)
		if got != tt.want || FormatRatio(got) != tt.printed {
			t.Errorf("Ratio(%v, %v) = %v printed %q, want %v printed %q", tt.v, tt.base, got, FormatRatio(got), tt.want, tt.printed)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "out.json")
	in := map[string]int{"a": 1}
	if err := WriteJSON(path, in); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]int
	if err := json.Unmarshal(b, &out); err != nil || out["a"] != 1 || b[len(b)-1] != '\n' {
		t.Errorf("wrote %q (%v), want the map and a newline", b, err)
	}
	if err := WriteJSON(filepath.Join(t.TempDir(), "missing", "out.json"), in); err == nil {
		t.Error("WriteJSON into a missing directory succeeded")
	}
}
