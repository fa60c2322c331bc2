package procstat

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
		{name: "a whole line", in: "4242 (tandem-proxy) S 1 2 3 0 -1 4194560 1000 0 0 0 1234 56 0 0 20 0 9 0 12345 1262916 5498 18446744073709551615\n", want: 1290},
		{name: "short", in: "7 (x) R 1 2 3", wantErr: true},
		{name: "no name", in: "7 x R", wantErr: true},
		{name: "not a number", in: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 ten 5 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseCPUTicks([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseCPUTicks = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestCPUTimeSelf(t *testing.T) {
	t.Parallel()
	if _, err := CPUTicks(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if _, err := CPUTime(-1); err == nil {
		t.Error("CPUTime of no process succeeded")
	}
}
