//go:build linux

package collector

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/resource/topology"
)

type linuxPerf struct{}

func newPerfOpener() perfOpener { return linuxPerf{} }

func hwAttr(config uint64) *unix.PerfEventAttr {
	return &unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_HARDWARE,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Config:      config,
		Read_format: unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING,
		Bits:        unix.PerfBitExcludeHv,
	}
}

func (linuxPerf) probe() error {
	fd, err := unix.PerfEventOpen(hwAttr(unix.PERF_COUNT_HW_CPU_CYCLES), 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("perf_event_open cycles: %w", err)
	}
	return unix.Close(fd)
}

type perfGroup struct {
	cycles, instructions []int // one fd per CPU
}

func (linuxPerf) openCgroup(dir string) (counterGroup, error) {
	cg, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("open perf cgroup: %w", err)
	}
	defer cg.Close()
	g := &perfGroup{}
	for _, cpu := range onlineCPUs() {
		for _, ev := range []struct {
			config uint64
			fds    *[]int
		}{{unix.PERF_COUNT_HW_CPU_CYCLES, &g.cycles}, {unix.PERF_COUNT_HW_INSTRUCTIONS, &g.instructions}} {
			// A cgroup event counts only while a task of the cgroup runs on that CPU, so it needs one
			// event per CPU and costs nothing on CPUs the container does not use.
			fd, err := unix.PerfEventOpen(hwAttr(ev.config), int(cg.Fd()), cpu, -1, unix.PERF_FLAG_PID_CGROUP|unix.PERF_FLAG_FD_CLOEXEC)
			if err != nil {
				g.close()
				return nil, fmt.Errorf("perf_event_open on cpu %d: %w", cpu, err)
			}
			*ev.fds = append(*ev.fds, fd)
		}
	}
	return g, nil
}

// onlineCPUs lists the CPUs a cgroup event must be opened on: every online CPU, not only those
// this process may run on (tandem-proxy itself may be pinned to the system CPUs).
func onlineCPUs() []int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err == nil {
		if set, err := topology.ParseCPUList(string(b)); err == nil && set.Size() > 0 {
			return set.List()
		}
	}
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

func readCounter(fd int) (counterReading, error) {
	var b [24]byte
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return counterReading{}, err
	}
	if n != len(b) {
		return counterReading{}, errors.New("short perf counter read")
	}
	return counterReading{
		value:   binary.NativeEndian.Uint64(b[0:]),
		enabled: binary.NativeEndian.Uint64(b[8:]),
		running: binary.NativeEndian.Uint64(b[16:]),
	}, nil
}

func (g *perfGroup) read() (counterSample, error) {
	var total counterSample
	for i := range g.cycles {
		c, err := readCounter(g.cycles[i])
		if err != nil {
			return counterSample{}, fmt.Errorf("read cycles: %w", err)
		}
		in, err := readCounter(g.instructions[i])
		if err != nil {
			return counterSample{}, fmt.Errorf("read instructions: %w", err)
		}
		total = total.add(counterSample{cycles: c, instructions: in})
	}
	return total, nil
}

func (g *perfGroup) close() {
	for _, fd := range append(g.cycles, g.instructions...) {
		_ = unix.Close(fd)
	}
	g.cycles, g.instructions = nil, nil
}
