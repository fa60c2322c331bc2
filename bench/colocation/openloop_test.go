package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRequestCount(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		d    time.Duration
		want int
	}{
		{400, 20 * time.Second, 8000},
		{1200, 21 * time.Second, 25200},
		{400, 100 * time.Millisecond, 40}, // not 39 from floating-point error
		{3, 1500 * time.Millisecond, 4},   // 4.5 requests fit: the fifth is not due yet
		{0, time.Second, 0},
		{100, 0, 0},
	} {
		if got := requestCount(tc.rate, tc.d); got != tc.want {
			t.Errorf("requestCount(%v, %v) = %d, want %d", tc.rate, tc.d, got, tc.want)
		}
	}
}

func TestDueAt(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		rate float64
		i    int
		want time.Duration
	}{
		{400, 0, 0},
		{400, 1, 2500 * time.Microsecond},
		{400, 400, time.Second},
		{1200, 3, 2500 * time.Microsecond},
		{3, 1, 333333333}, // the schedule does not drift: i/rate from the start, not a sum of rounded gaps
		{3, 3000, 1000 * time.Second},
	} {
		if got := dueAt(start, tc.rate, tc.i).Sub(start); got != tc.want {
			t.Errorf("dueAt(rate %v, i %d) = start+%v, want start+%v", tc.rate, tc.i, got, tc.want)
		}
	}
}

func TestAccount(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name       string
		outs       []outcome
		from       time.Time
		wantLat    []int64
		wantSent   int
		wantFailed int
		wantLagUs  int64
	}{
		{
			name:     "latency counts from the due time, not the send time",
			outs:     []outcome{{due: ms(0), sent: ms(30), done: ms(31)}},
			from:     t0,
			wantLat:  []int64{31000},
			wantSent: 1, wantLagUs: 30000,
		},
		{
			name: "requests due in the warm-up are left out",
			outs: []outcome{
				{due: ms(0), sent: ms(0), done: ms(500)},
				{due: ms(10), sent: ms(10), done: ms(12)},
			},
			from:     ms(5),
			wantLat:  []int64{2000},
			wantSent: 1,
		},
		{
			name: "a failure keeps its time to failure; a request never answered counts as failed at the timeout",
			outs: []outcome{
				{due: ms(0), sent: ms(0), done: ms(7), failed: true},
				{due: ms(1), sent: ms(1)},
			},
			from:     t0,
			wantLat:  []int64{7000, 5000000},
			wantSent: 2, wantFailed: 2, wantLagUs: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := account(tc.outs, 100, tc.from, 5*time.Second)
			if r.Sent != tc.wantSent || r.Failed != tc.wantFailed || r.MaxLagUs != tc.wantLagUs {
				t.Errorf("sent %d failed %d max lag %dµs, want %d, %d, %dµs", r.Sent, r.Failed, r.MaxLagUs, tc.wantSent, tc.wantFailed, tc.wantLagUs)
			}
			if len(r.LatencyUs) != len(tc.wantLat) {
				t.Fatalf("latencies %v, want %v", r.LatencyUs, tc.wantLat)
			}
			for i := range r.LatencyUs {
				if r.LatencyUs[i] != tc.wantLat[i] {
					t.Errorf("latencies %v, want %v", r.LatencyUs, tc.wantLat)
				}
			}
		})
	}
}

// TestRunLoadSeesTheQueue: a single-threaded service stalls 200 ms once. An open-loop client keeps
// sending on schedule, so the requests due during the stall queue behind it and every one of them
// shows the wait; a closed-loop client would have sent nothing during the stall and reported one slow
// request (coordinated omission).
func TestRunLoadSeesTheQueue(t *testing.T) {
	var mu sync.Mutex // one request at a time, as a one-worker service
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if n.Add(1) == 60 { // after the 200 ms warm-up at 200 rps
			time.Sleep(200 * time.Millisecond)
		}
	}))
	defer srv.Close()
	r := runLoad(context.Background(), srv.URL, 200, 200*time.Millisecond, time.Second, 5*time.Second)
	if r.Sent != 200 || r.Failed != 0 {
		t.Fatalf("sent %d (want 200 measured of 240), failed %d", r.Sent, r.Failed)
	}
	slow := 0
	for _, us := range r.LatencyUs {
		if us >= 50_000 {
			slow++
		}
	}
	// 200 ms at 200 rps: ~40 requests are due during the stall; those due in its first 150 ms wait at
	// least 50 ms.
	if slow < 20 {
		t.Errorf("%d requests took 50 ms or more, want at least 20: the queue behind the stall is not measured", slow)
	}
}
