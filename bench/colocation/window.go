package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/procfs"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/tandemkit/tandem/bench/internal/procstat"
	"github.com/tandemkit/tandem/bench/internal/runctx"
)

// window is the CPU time of the BE and LS cgroups at a cell's start, and the steal sampler that
// runs through it.
type window struct {
	be, ls   []string
	beU, lsU time.Duration
	// proxy is tandem-proxy's pid (0 without one), proxyU its CPU time at the start.
	proxy   int
	proxyU  time.Duration
	steal   float64
	start   time.Time
	sampler *stealSampler
}

func startWindow(be, ls []string, proxy int) (*window, error) {
	w := &window{be: be, ls: ls, proxy: proxy, start: time.Now()}
	var err error
	if w.proxyU, err = processCPU(proxy); err != nil {
		return nil, err
	}
	if w.steal, err = stealSeconds(); err != nil {
		return nil, err
	}
	if w.beU, err = sumUsage(be); err != nil {
		return nil, err
	}
	if w.lsU, err = sumUsage(ls); err != nil {
		return nil, err
	}
	// Last, so that no error above leaves it running.
	if w.sampler, err = startStealSampler("/proc/stat", stealEvery); err != nil {
		return nil, err
	}
	return w, nil
}

// stop ends the steal sampler of a window that failed before its end; after end it does nothing.
func (w *window) stop() { _, _, _, _, _ = w.sampler.end() }

// end fills c's cores and steal over the window and returns its stalls, for fillCell; extraLS is LS
// CPU outside the LS cgroups (the host client).
func (w *window) end(c *cell, extraLS time.Duration) (stalls, error) {
	st, n, samplerCPU, gap, err := w.sampler.end()
	if err != nil {
		return nil, err
	}
	beU, err := sumUsage(w.be)
	if err != nil {
		return nil, err
	}
	lsU, err := sumUsage(w.ls)
	if err != nil {
		return nil, err
	}
	steal, err := stealSeconds()
	if err != nil {
		return nil, err
	}
	proxyU, err := processCPU(w.proxy)
	if err != nil {
		return nil, err
	}
	wall := time.Since(w.start).Seconds()
	c.ProxyCores = (proxyU - w.proxyU).Seconds() / wall
	// Rounded: the counter moves in 10 ms units, and 20 ms read as 20.000000000003 would exceed a
	// -max-steal of 20ms.
	c.StealMs = math.Round((steal - w.steal) * 1000)
	c.BECores = (beU - w.beU).Seconds() / wall
	c.LSCores = (lsU - w.lsU + extraLS).Seconds() / wall
	c.StealIntervals, c.SamplerCores, c.SampleMaxGapMs = n, samplerCPU.Seconds()/wall, float64(gap)/float64(time.Millisecond)
	return st, nil
}

// processCPU is the CPU time (user and system) process pid has used, 0 for pid 0. tandem-proxy is a
// process of the host, beside the host view's client: what it uses is the node agent's cost, and the
// host client competes with it.
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	t, err := procstat.CPUTime(pid)
	if err != nil {
		return 0, fmt.Errorf("read tandem-proxy's CPU time: %w", err)
	}
	return t, nil
}

// stealSeconds is the CPU time the hypervisor has taken from this machine's CPUs since boot (the
// steal column of /proc/stat), summed over the CPUs.
func stealSeconds() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, fmt.Errorf("open /proc: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, fmt.Errorf("read /proc/stat: %w", err)
	}
	return st.CPUTotal.Steal, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the load client's result: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse the load client's result %s: %w", path, err)
	}
	return nil
}

func readResult(path string, c *cell, st stalls) error {
	var r loadResult
	if err := readJSON(path, &r); err != nil {
		return err
	}
	fillCell(c, r, st)
	return nil
}

// waitExited polls until a container has exited, and fails unless it exited 0.
func waitExited(ctx context.Context, rs internalapi.RuntimeService, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := rs.ContainerStatus(ctx, id, false)
		if err != nil {
			return fmt.Errorf("status of the load client: %w", err)
		}
		if s := st.GetStatus(); s.GetState() == runtimeapi.ContainerState_CONTAINER_EXITED {
			if s.GetExitCode() != 0 {
				return fmt.Errorf("the load client exited %d: see %s", s.GetExitCode(), s.GetLogPath())
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the load client still runs after %v", timeout)
		}
		if err := runctx.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitServing polls url until it answers 200.
func waitServing(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := getOK(ctx, url)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the LS service at %s does not answer 200 after %v: %w", url, timeout, err)
		}
		if err := runctx.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// getOK GETs url and says why the answer is not 200.
func getOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}
