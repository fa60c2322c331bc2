package main

import (
	"os"
	"testing"
)

func TestParseCPUTicks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{name: "containerd", in: "4242 (containerd) S 1 4242 4242 0 -1 4194560 9000 0 0 0 1234 567 0 0 20 0 14 0 100 0 0", want: 1801},
		// The name may hold spaces and parentheses; fields count from the last ')'.
		{name: "odd name", in: "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 100 0 0", want: 15},
		{name: "short", in: "7 (x) R 1 2 3", wantErr: true},
		{name: "no name", in: "7 x R", wantErr: true},
		{name: "not a number", in: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 ten 5 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseCPUTicks([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseCPUTicks = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestReadCPUTicksSelf(t *testing.T) {
	t.Parallel()
	if _, err := readCPUTicks(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
