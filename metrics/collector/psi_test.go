package collector

import "testing"

func TestParsePressure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    pressure
		wantErr bool
	}{
		{
			name: "some and full",
			in:   "some avg10=21.08 avg60=12.86 avg300=37.58 total=2646776005\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=17\n",
			want: pressure{someMicros: 2646776005, fullMicros: 17, hasFull: true},
		},
		{
			name: "node cpu before 5.13 has no full line",
			in:   "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
			want: pressure{someMicros: 5},
		},
		{name: "no total", in: "some avg10=0.00\n", wantErr: true},
		{name: "bad total", in: "some total=x\n", wantErr: true},
		{name: "only full", in: "full avg10=0.00 total=1\n", wantErr: true},
		{name: "empty", in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parsePressure([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParsePressure(f *testing.F) {
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parsePressure(b) // must not panic
	})
}
