package main

import (
	"math"
	"time"

	"github.com/tandemkit/tandem/bench/internal/exepages"
	"github.com/tandemkit/tandem/bench/internal/figures"
)

type jsonQuantiles struct {
	P50us        float64 `json:"p50Micros"`
	P99us        float64 `json:"p99Micros"`
	HalfGapP50us float64 `json:"halfGapP50Micros"`
	HalfGapP99us float64 `json:"halfGapP99Micros"`
	Samples      int     `json:"samples"`
}

type jsonComparison struct {
	FloorAddedUs     float64  `json:"floorAddedMicros"`
	TandemAddedUs    float64  `json:"tandemAddedMicros"`
	NoiseUs          float64  `json:"noiseMicros"`
	Ratio            *float64 `json:"ratio"` // null when the floor's added latency is within noise
	Limit            float64  `json:"limit"`
	FloorWithinNoise bool     `json:"floorWithinNoise"`
	Meets            bool     `json:"meets"`
	// The 90 % interval of tandem added - limit x floor added, and whether
	// the run has shown a miss (excessInterval).
	ExcessLowUs  float64 `json:"excessLowMicros"`
	ExcessHighUs float64 `json:"excessHighMicros"`
	MissShown    bool    `json:"missShown"`
}

type jsonRow struct {
	RPC     string                   `json:"rpc"`
	Mode    string                   `json:"mode"`
	Targets map[string]jsonQuantiles `json:"targets"`
	P50     *jsonComparison          `json:"p50,omitempty"`
	P99     *jsonComparison          `json:"p99,omitempty"`
}

type jsonIdle struct {
	Seconds          float64  `json:"seconds"`
	CPUTicks         int64    `json:"cpuTicks"`
	CPUPercentOfCore float64  `json:"cpuPercentOfOneCore"`
	VmRSSStartKiB    int64    `json:"vmRSSStartKiB"`
	VmRSSEndKiB      int64    `json:"vmRSSEndKiB"`
	VmHWMKiB         int64    `json:"vmHWMKiB"`
	Switches         switches `json:"contextSwitches"`
	// Set where the referenced bits could be cleared (root).
	AnonKiB       *int64 `json:"anonKiB,omitempty"`
	FileKiB       *int64 `json:"fileKiB,omitempty"`
	FileUsedKiB   *int64 `json:"fileUsedInWindowKiB,omitempty"`
	WorkingSetKiB *int64 `json:"workingSetKiB,omitempty"`
	// The resident pages of the executable by module and package, in bytes.
	Executable      *exepages.Report `json:"executable,omitempty"`
	ExecutableError string           `json:"executableError,omitempty"`
}

type jsonRun struct {
	Seconds    float64    `json:"seconds"`
	LoadBefore string     `json:"loadBefore"`
	LoadAfter  string     `json:"loadAfter"`
	Latency    []jsonRow  `json:"latency"`
	ProxyCPU   []proxyCPU `json:"proxyCPU"`
	Met        bool       `json:"latencyTargetsMet"`
}

type jsonReport struct {
	Machine          machine   `json:"machine"`
	FloorUnaryInvoke bool      `json:"floorUnaryInvoke"`
	FloorInProcess   bool      `json:"floorInProcess"`
	FloorFromBench   bool      `json:"floorFromBenchmark"`
	AA               bool      `json:"aaCheck"`
	AAExtraWorkUs    float64   `json:"aaExtraWorkMicros,omitempty"`
	ClientGCInBatch  bool      `json:"clientGCInBatches"`
	TandemBuild      string    `json:"tandemBuild,omitempty"`
	Pods             int       `json:"pods"`
	Containers       int       `json:"containers"`
	Iterations       int       `json:"iterations"`
	Batch            int       `json:"batchPerCaller"`
	Warmup           int       `json:"warmupPerCaller"`
	Runs             []jsonRun `json:"runs"`
	TandemFreshRSS   *int64    `json:"tandemRSSAfterStartKiB,omitempty"`
	TandemIdle       *jsonIdle `json:"tandemIdle,omitempty"`
	FloorIdle        *jsonIdle `json:"floorIdle,omitempty"`
	TargetP50Ratio   float64   `json:"targetP50Ratio"`
	TargetP99Ratio   float64   `json:"targetP99Ratio"`
	TargetRSSMiB     float64   `json:"targetRSSMiB"`
	TargetCPUPercent float64   `json:"targetCPUPercent"`
}

func toMicros(d time.Duration) float64 { return float64(d) * microsPerNano }

func toJSONComparison(c *comparison) *jsonComparison {
	if c == nil {
		return nil
	}
	j := &jsonComparison{
		FloorAddedUs: toMicros(c.FloorAdded), TandemAddedUs: toMicros(c.TandemAdded), NoiseUs: toMicros(c.Noise),
		Limit: c.Limit, FloorWithinNoise: c.FloorWithinNoise, Meets: c.Meets,
		ExcessLowUs: toMicros(c.Excess.Low), ExcessHighUs: toMicros(c.Excess.High), MissShown: c.MissShown,
	}
	if !math.IsNaN(c.Ratio) {
		r := c.Ratio
		j.Ratio = &r
	}
	return j
}

func toJSONIdle(c idleCost) *jsonIdle {
	j := &jsonIdle{
		Seconds: c.Seconds, CPUTicks: c.CPUTicks, CPUPercentOfCore: c.CPUPercentCore,
		VmRSSStartKiB: c.Start.VmRSSKiB, VmRSSEndKiB: c.End.VmRSSKiB, VmHWMKiB: c.End.VmHWMKiB,
		Switches: c.Switches, Executable: c.Executable, ExecutableError: c.ExecutableErr,
	}
	if u := c.Used; u != nil {
		ws := u.KiB()
		j.AnonKiB, j.FileKiB, j.FileUsedKiB, j.WorkingSetKiB = &u.AnonKiB, &u.FileKiB, &u.FileUsedKiB, &ws
	}
	return j
}

func (r *report) writeJSON(path string) error {
	j := jsonReport{
		Machine: r.machine, FloorUnaryInvoke: r.opts.floorUnary, FloorInProcess: r.opts.floorInProcess, FloorFromBench: r.opts.floorFromBenchmark, AA: r.opts.aa, AAExtraWorkUs: toMicros(r.opts.aaExtraWork),
		ClientGCInBatch: r.opts.gcInBatches, TandemBuild: r.proxyBuild,
		Pods: r.opts.pods, Containers: r.opts.pods * r.opts.containersPerPod,
		Iterations: r.opts.iterations, Batch: r.opts.batch, Warmup: r.opts.warmup,
		TargetP50Ratio: limitP50, TargetP99Ratio: limitP99, TargetRSSMiB: limitRSSMiB, TargetCPUPercent: limitCPUPct,
	}
	for _, run := range r.runs {
		jrun := jsonRun{Seconds: run.Seconds, LoadBefore: run.LoadBefore, LoadAfter: run.LoadAfter, ProxyCPU: run.proxyCPU, Met: run.met()}
		for _, rw := range run.rows {
			jr := jsonRow{RPC: rw.rpc, Mode: rw.mode, Targets: map[string]jsonQuantiles{}, P50: toJSONComparison(rw.p50), P99: toJSONComparison(rw.p99)}
			for t, q := range rw.q {
				jr.Targets[t] = jsonQuantiles{P50us: toMicros(q.P50), P99us: toMicros(q.P99), HalfGapP50us: toMicros(q.HalfGapP50), HalfGapP99us: toMicros(q.HalfGapP99), Samples: q.N}
			}
			jrun.Latency = append(jrun.Latency, jr)
		}
		j.Runs = append(j.Runs, jrun)
	}
	if r.Idle != nil {
		fresh := r.Idle.TandemFresh.VmRSSKiB
		j.TandemFreshRSS = &fresh
		j.TandemIdle = toJSONIdle(r.Idle.Tandem)
		if r.Idle.Floor != nil {
			j.FloorIdle = toJSONIdle(*r.Idle.Floor)
		}
	}
	return figures.WriteJSON(path, j)
}
