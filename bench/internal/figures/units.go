package figures

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

// Duration formats d in the unit that suits it: µs under a millisecond, ms under a second, else s.
func Duration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + Duration(-d)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// Signed is Duration with a sign always: a difference from a baseline.
func Signed(d time.Duration) string {
	if d >= 0 {
		return "+" + Duration(d)
	}
	return Duration(d)
}

// In is d counted in unit (time.Millisecond for milliseconds).
func In(d, unit time.Duration) float64 { return float64(d) / float64(unit) }

// Cell formats d in unit for a table's column of that unit: whole numbers from 100 up, one decimal
// below.
func Cell(d, unit time.Duration) string {
	v := In(d, unit)
	if math.Abs(v) >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// Ratio is v over the baseline of the same run, 0 when there is no baseline.
func Ratio(v, baseline float64) float64 {
	if baseline <= 0 {
		return 0
	}
	return v / baseline
}

// FormatRatio prints a ratio from Ratio with two decimals, "-" when there was no baseline.
func FormatRatio(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", r)
}

// WriteJSON writes v, indented, to path ("-" for standard output), for a run's results to be compared
// later.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the results as JSON: %w", err)
	}
	if path == "-" {
		_, err = os.Stdout.Write(append(b, '\n'))
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the results to %s (is the directory writable?): %w", path, err)
	}
	return nil
}
