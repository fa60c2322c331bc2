package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
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
	srv := func(from, to int) served {
		return served{cpuFrom: 1, cpuTo: 1, from: ms(from).UnixNano(), to: ms(to).UnixNano()}
	}
	for _, tc := range []struct {
		name       string
		outs       []outcome
		from       time.Time
		wantLat    []int64
		wantDue    []int64
		wantCPUs   []cpuSet
		wantSent   int
		wantFailed int
		wantLagUs  int64
		wantOut    int
	}{
		{
			name:     "latency counts from the due time, not the send time",
			outs:     []outcome{{due: ms(0), sent: ms(30), done: ms(31), cpus: 0b11, srv: srv(30, 31), srvOK: true}},
			from:     t0,
			wantLat:  []int64{31000},
			wantDue:  []int64{0},
			wantCPUs: []cpuSet{0b11},
			wantSent: 1, wantLagUs: 30000,
		},
		{
			name: "requests due in the warm-up are left out; due times count from the end of the warm-up",
			outs: []outcome{
				{due: ms(0), sent: ms(0), done: ms(500), cpus: 0b1},
				{due: ms(10), sent: ms(10), done: ms(12), cpus: 0b10},
			},
			from:     ms(5),
			wantLat:  []int64{2000},
			wantDue:  []int64{5000},
			wantCPUs: []cpuSet{0b10},
			wantSent: 1,
		},
		{
			name: "a failure keeps its time to failure; a request never answered counts as failed at the timeout, on unknown CPUs",
			outs: []outcome{
				{due: ms(0), sent: ms(0), done: ms(7), failed: true, cpus: allCPUs},
				{due: ms(1), sent: ms(1)},
			},
			from:     t0,
			wantLat:  []int64{7000, 5000000},
			wantDue:  []int64{0, 1000},
			wantCPUs: []cpuSet{allCPUs, 0},
			wantSent: 2, wantFailed: 2, wantLagUs: 0,
		},
		{
			name: "the server's handling outside [sent, done] by the client's clock is counted",
			outs: []outcome{
				{due: ms(0), sent: ms(0), done: ms(2), cpus: 1, srv: srv(0, 2), srvOK: true},    // within, at the edges
				{due: ms(1), sent: ms(1), done: ms(3), cpus: 1, srv: srv(0, 2), srvOK: true},    // began before it was sent
				{due: ms(2), sent: ms(2), done: ms(4), cpus: 1, srv: srv(3, 5), srvOK: true},    // ended after it was read
				{due: ms(3), sent: ms(3), done: ms(5), cpus: 1, srv: srv(90, 95), srvOK: false}, // no record: not compared
			},
			from:     t0,
			wantLat:  []int64{2000, 2000, 2000, 2000},
			wantDue:  []int64{0, 1000, 2000, 3000},
			wantCPUs: []cpuSet{1, 1, 1, 1},
			wantSent: 4, wantOut: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := account(tc.outs, 100, tc.from, 5*time.Second)
			if r.Sent != tc.wantSent || r.Failed != tc.wantFailed || r.MaxLagUs != tc.wantLagUs || r.ServerOutside != tc.wantOut {
				t.Errorf("sent %d failed %d max lag %dµs server outside %d, want %d, %d, %dµs, %d",
					r.Sent, r.Failed, r.MaxLagUs, r.ServerOutside, tc.wantSent, tc.wantFailed, tc.wantLagUs, tc.wantOut)
			}
			if !slices.Equal(r.LatencyUs, tc.wantLat) || !slices.Equal(r.DueUs, tc.wantDue) || !slices.Equal(r.CPUs, tc.wantCPUs) {
				t.Errorf("latencies %v, due %v, CPUs %v; want %v, %v, %v", r.LatencyUs, r.DueUs, r.CPUs, tc.wantLat, tc.wantDue, tc.wantCPUs)
			}
			if r.DueFromUnixNs != tc.from.UnixNano() {
				t.Errorf("due times count from %d, want %d", r.DueFromUnixNs, tc.from.UnixNano())
			}
		})
	}
}

func TestServed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		want       served
		ok         bool
	}{
		{"the serve agent's body", string(appendServed(nil, 42, served{0, 1, 1700000000000000000, 1700000000000200000})),
			served{0, 1, 1700000000000000000, 1700000000000200000}, true},
		{"an old body: the burn's result alone", "42\n", served{}, false},
		{"empty (a failed request)", "", served{}, false},
		{"a negative CPU (getcpu failed)", "42 -1 0 1 2\n", served{}, false},
		{"not numbers", "42 a b c d\n", served{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got, ok := parseServed([]byte(tc.body)); got != tc.want || ok != tc.ok {
				t.Errorf("parseServed(%q) = %+v, %v; want %+v, %v", tc.body, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func FuzzParseServed(f *testing.F) {
	f.Add(appendServed(nil, 7, served{1, 0, 5, 6}))
	f.Add([]byte("1 2 3 4 5 6"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, ok := parseServed(b)
		if ok && (s.cpuFrom < 0 || s.cpuTo < 0) {
			t.Fatalf("parseServed(%q) = %+v: a negative CPU", b, s)
		}
		if ok {
			if back, ok2 := parseServed(appendServed(nil, 0, s)); !ok2 || back != s {
				t.Fatalf("round trip of %+v gave %+v, %v", s, back, ok2)
			}
		}
	})
}

// TestRunLoadRecordsCPUs: each request carries the CPUs the server reports and the client's own.
func TestRunLoadRecordsCPUs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		now := time.Now().UnixNano()
		_, _ = w.Write(appendServed(nil, 0, served{cpuFrom: 60, cpuTo: 61, from: now, to: now}))
	}))
	defer srv.Close()
	r := runLoad(context.Background(), srv.URL, 200, 0, 100*time.Millisecond, 5*time.Second)
	if r.Sent != 20 || r.Failed != 0 || len(r.CPUs) != 20 || len(r.DueUs) != 20 || r.ServerOutside != 0 {
		t.Fatalf("sent %d, failed %d, %d CPU sets, %d due times, %d outside; want 20, 0, 20, 20, 0", r.Sent, r.Failed, len(r.CPUs), len(r.DueUs), r.ServerOutside)
	}
	for i, c := range r.CPUs {
		// The test machine has fewer than 60 CPUs: what is left besides the server's two is the client's.
		if !c.has(60) || !c.has(61) || c == allCPUs || c&^(1<<60|1<<61) == 0 {
			t.Errorf("request %d ran on %b: want CPUs 60 and 61 (the server's) and the client's", i, c)
		}
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
