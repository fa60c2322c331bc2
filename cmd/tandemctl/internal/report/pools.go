package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

// Pool is one class's CPU pool.
type Pool struct {
	Class resqos.Class `json:"class"`
	CPUs  string       `json:"cpus"`
	Count int          `json:"count"`
}

// Allocation is the exclusive CPUs of one container, named from the store where the proxy knows its pod.
type Allocation struct {
	Owner     string       `json:"owner"`
	Namespace string       `json:"namespace,omitempty"`
	Pod       string       `json:"pod,omitempty"`
	PodUID    string       `json:"podUID"`
	Container string       `json:"container"`
	Class     resqos.Class `json:"class"`
	CPUs      string       `json:"cpus"`
	Count     int          `json:"count"`
}

// Pools is the whole `tandemctl pools` report.
type Pools struct {
	Pools       []Pool       `json:"pools"`
	Allocations []Allocation `json:"allocations"`
}

// BuildPools lists the four pools in class order and the allocations by namespace, pod and container.
func BuildPools(d *PoolsDump, snap *store.Snapshot) (*Pools, error) {
	out := &Pools{Allocations: []Allocation{}}
	for _, p := range []struct {
		class resqos.Class
		cpus  string
	}{{resqos.LSE, d.LSE}, {resqos.LSR, d.LSR}, {resqos.LS, d.LS}, {resqos.BE, d.BE}} {
		n, err := countCPUs(p.cpus)
		if err != nil {
			return nil, fmt.Errorf("pool %s from tandem-proxy: %w", p.class, err)
		}
		out.Pools = append(out.Pools, Pool{Class: p.class, CPUs: p.cpus, Count: n})
	}
	byUID := map[string]*store.Pod{}
	if snap != nil {
		for _, p := range snap.Pods {
			byUID[p.UID] = p
		}
	}
	for owner, a := range d.Allocations {
		n, err := countCPUs(a.CPUs)
		if err != nil {
			return nil, fmt.Errorf("allocation %s from tandem-proxy: %w", owner, err)
		}
		// Owners are "<podUID>/<container>"; container names cannot hold a slash, pod UIDs do not.
		uid, ctr, _ := strings.Cut(owner, "/")
		al := Allocation{Owner: owner, PodUID: uid, Container: ctr, Class: a.Class, CPUs: a.CPUs, Count: n}
		if p, ok := byUID[uid]; ok {
			al.Namespace, al.Pod = p.Namespace, p.Name
		}
		out.Allocations = append(out.Allocations, al)
	}
	slices.SortFunc(out.Allocations, func(a, b Allocation) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod),
			cmp.Compare(a.PodUID, b.PodUID), cmp.Compare(a.Container, b.Container))
	})
	return out, nil
}

func countCPUs(list string) (int, error) {
	s, err := topology.ParseCPUList(list)
	if err != nil {
		return 0, err
	}
	return s.Size(), nil
}
