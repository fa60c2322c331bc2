package collector

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/resource/cgroup"
)

// psiResources are the pressure files, in the order metrics list them.
var psiResources = [...]string{"cpu", "memory", "io"}

// pressure is one PSI file: cumulative stall time of "some" and "full" tasks, in microseconds. The
// kernel's avg10/60/300 are left out: rate() over the totals gives any window the dashboard wants.
type pressure struct {
	someMicros, fullMicros uint64
	hasFull                bool // the node's cpu file has had a full line only since 5.13
}

func parsePressure(b []byte) (pressure, error) {
	var p pressure
	haveSome := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		var total uint64
		found := false
		for _, f := range fields[1:] {
			k, v, ok := strings.Cut(f, "=")
			if !ok || k != "total" {
				continue
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return pressure{}, fmt.Errorf("pressure: %s total: %w", fields[0], err)
			}
			total, found = n, true
		}
		if !found {
			return pressure{}, fmt.Errorf("pressure: %s line has no total", fields[0])
		}
		switch fields[0] {
		case "some":
			p.someMicros, haveSome = total, true
		case "full":
			p.fullMicros, p.hasFull = total, true
		}
	}
	if err := sc.Err(); err != nil {
		return pressure{}, fmt.Errorf("pressure: %w", err)
	}
	if !haveSome {
		return pressure{}, errors.New("pressure: no some line")
	}
	return p, nil
}

// podPressure is one pod's PSI, on cgroup v2 only.
type podPressure struct {
	Target // container fields empty
	res    [len(psiResources)]pressure
	ok     [len(psiResources)]bool
}

type psiSample struct {
	node   [len(psiResources)]pressure
	nodeOK [len(psiResources)]bool
	pods   []podPressure
}

// psiSource samples /proc/pressure and, on cgroup v2, each pod cgroup's *.pressure files.
type psiSource struct {
	proc, cgroupRoot string

	mu      sync.Mutex
	podPSI  bool
	latest  atomic.Pointer[psiSample]
	podLogs map[string]bool // pods whose failed read was logged
}

func newPSISource(proc, cgroupRoot string) *psiSource {
	return &psiSource{proc: proc, cgroupRoot: cgroupRoot, podLogs: map[string]bool{}}
}

// detect needs /proc/pressure/cpu (CONFIG_PSI, not disabled by psi=0). Per-pod pressure needs the pod
// cgroups on a cgroup v2 hierarchy; on v1 and hybrid hosts it is off with one line.
func (p *psiSource) detect(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join(p.proc, "pressure", "cpu"))
	if err != nil {
		return fmt.Errorf("no pressure stall information (kernel without CONFIG_PSI or booted with psi=0): %w", err)
	}
	if _, err := parsePressure(b); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(p.cgroupRoot, "cgroup.controllers")); err == nil {
		p.podPSI = true
	} else {
		klog.FromContext(ctx).Info("Per-pod pressure off: it needs cgroup v2", "cgroupRoot", p.cgroupRoot)
	}
	return nil
}

func (p *psiSource) sample(ctx context.Context, targets []Target) {
	p.mu.Lock()
	defer p.mu.Unlock()
	logger := klog.FromContext(ctx)
	s := &psiSample{}
	for i, r := range psiResources {
		b, err := os.ReadFile(filepath.Join(p.proc, "pressure", r))
		if err != nil {
			continue // io and memory may be missing where cpu is not; the metric is simply absent
		}
		pr, err := parsePressure(b)
		if err != nil {
			logger.V(2).Info("Skipping node pressure", "resource", r, "err", err.Error())
			continue
		}
		s.node[i], s.nodeOK[i] = pr, true
	}
	if p.podPSI {
		seen := map[string]bool{}
		for _, t := range targets {
			key := t.PodUID
			if key == "" {
				key = t.Namespace + "/" + t.Pod
			}
			if seen[key] || t.CgroupParent == "" {
				continue
			}
			seen[key] = true
			pp := podPressure{Target: Target{Namespace: t.Namespace, Pod: t.Pod, PodUID: t.PodUID, QoS: t.QoS, CgroupParent: t.CgroupParent}}
			dir := filepath.Join(p.cgroupRoot, cgroup.Path(t.CgroupParent))
			found := false
			for i, r := range psiResources {
				b, err := os.ReadFile(filepath.Join(dir, r+".pressure"))
				if err != nil {
					continue
				}
				if pr, err := parsePressure(b); err == nil {
					pp.res[i], pp.ok[i], found = pr, true, true
				} else if !p.podLogs[key] {
					logger.V(2).Info("Skipping pod pressure", "pod", klog.KRef(t.Namespace, t.Pod), "err", err.Error())
					p.podLogs[key] = true
				}
			}
			if found {
				s.pods = append(s.pods, pp)
			}
		}
		for k := range p.podLogs {
			if !seen[k] {
				delete(p.podLogs, k)
			}
		}
	}
	p.latest.Store(s)
}
