package runctx

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestCleanups(t *testing.T) {
	t.Parallel()
	errStop := errors.New("stop failed")
	tests := []struct {
		name      string
		fail      map[int]bool
		cancelled bool
		wantErr   bool
	}{
		{name: "all succeed"},
		{name: "a failing step does not stop the others", fail: map[int]bool{1: true}, wantErr: true},
		{name: "a cancelled run still cleans up", cancelled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var ran []int
			c := Cleanups{Timeout: time.Second}
			for i := range 3 {
				c.Add(func(ctx context.Context) error {
					if ctx.Err() != nil {
						t.Errorf("step %d got a done context", i)
					}
					ran = append(ran, i)
					if tt.fail[i] {
						return errStop
					}
					return nil
				})
			}
			if tt.cancelled {
				cancel()
			}
			err := c.Run(ctx)
			if !reflect.DeepEqual(ran, []int{2, 1, 0}) {
				t.Errorf("ran %v, want the last added first", ran)
			}
			if (err != nil) != tt.wantErr || (tt.wantErr && !errors.Is(err, errStop)) {
				t.Errorf("Run = %v, want error %v", err, tt.wantErr)
			}
			if err := c.Run(ctx); err != nil || len(ran) != 3 {
				t.Errorf("a second Run ran steps again (%v, %v)", ran, err)
			}
		})
	}
}
