package figures

import (
	"testing"
	"time"
)

func TestNearest(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // reversed: Nearest must sort
	}
	tests := []struct {
		name string
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{name: "empty", in: nil, q: 0.5, want: 0},
		{name: "one value", in: ms(7), q: 0.99, want: 7 * time.Millisecond},
		{name: "median of odd count", in: ms(5, 1, 3), q: 0.5, want: 3 * time.Millisecond},
		{name: "median of even count is the lower middle", in: ms(4, 1, 3, 2), q: 0.5, want: 2 * time.Millisecond},
		{name: "p99 of 1..100", in: ms(hundred...), q: 0.99, want: 99 * time.Millisecond},
		{name: "p50 of 1..100", in: ms(hundred...), q: 0.50, want: 50 * time.Millisecond},
		{name: "p100 is the maximum", in: ms(hundred...), q: 1, want: 100 * time.Millisecond},
		{name: "p0 is the minimum", in: ms(4, 3), q: 0, want: 3 * time.Millisecond},
		{name: "p60 of four is the third", in: ms(1, 2, 3, 4), q: 0.6, want: 3 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Nearest(tt.in, tt.q); got != tt.want {
				t.Errorf("Nearest(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}
