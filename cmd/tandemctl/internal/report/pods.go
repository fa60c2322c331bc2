package report

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/resource/cgroup"
	resqos "github.com/tandemkit/tandem/resource/qos"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

// Field is one setting of a container as the kernel holds it and as tandem-proxy last applied it.
type Field struct {
	// Kernel is what the cgroup file holds, in the table's units; empty when it could not be read.
	Kernel string `json:"kernel,omitempty"`
	// Applied is what tandem-proxy's store says it last applied; empty when it set nothing.
	Applied string `json:"applied,omitempty"`
	// Unread says why Kernel is empty.
	Unread string `json:"unread,omitempty"`
	// Differs is true when both are known and disagree: something changed the cgroup behind the
	// proxy's back, or the proxy's last update did not reach the kernel.
	Differs bool `json:"differs,omitempty"`
}

// Container is one row of `tandemctl pods`.
type Container struct {
	Namespace   string       `json:"namespace"`
	Pod         string       `json:"pod"`
	PodUID      string       `json:"podUID,omitempty"`
	PodID       string       `json:"podID"`
	Name        string       `json:"container"`
	ID          string       `json:"containerID"`
	State       string       `json:"state"`
	QoS         resqos.Class `json:"qosClass,omitempty"`
	Cgroup      string       `json:"cgroup,omitempty"`
	Cpuset      Field        `json:"cpuset"`
	CPUQuota    Field        `json:"cpuQuota"`
	CPUShares   Field        `json:"cpuShares"`
	CPUIdle     Field        `json:"cpuIdle"`
	MemoryLimit Field        `json:"memoryLimit"`
}

// Pods is the whole `tandemctl pods` report.
type Pods struct {
	CgroupRoot string `json:"cgroupRoot"`
	// CgroupVersion is 1 or 2, 0 when no hierarchy was found. On 2, CPUShares holds cpu.weight.
	CgroupVersion int         `json:"cgroupVersion"`
	Containers    []Container `json:"containers"`
}

// BuildPods joins the proxy's store with the kernel's cgroup files, one row per container, sorted by
// namespace, pod and container. Exited containers are left out unless all is set: their cgroups are
// gone, so they would show nothing but what the proxy once applied.
func BuildPods(snap *store.Snapshot, k *Kernel, all bool) *Pods {
	pods := map[string]*store.Pod{}
	for _, p := range snap.Pods {
		pods[p.ID] = p
	}
	out := &Pods{CgroupRoot: k.root, CgroupVersion: k.version, Containers: []Container{}}
	for _, c := range snap.Containers {
		if c.State == store.ContainerExited && !all {
			continue
		}
		p, ok := pods[c.PodSandboxID]
		if !ok {
			// The store lists a container whose sandbox it lost; show it rather than hide it.
			p = &store.Pod{ID: c.PodSandboxID, Name: "?" + short(c.PodSandboxID)}
		}
		out.Containers = append(out.Containers, buildContainer(p, c, k))
	}
	slices.SortFunc(out.Containers, func(a, b Container) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod),
			cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func buildContainer(p *store.Pod, c *store.Container, k *Kernel) Container {
	res := c.Resources
	if res == nil {
		res = &hooks.Resources{}
	}
	podInfo := &hooks.PodInfo{ID: p.ID, Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels, Annotations: p.Annotations, CgroupParent: p.CgroupParent}
	files := k.container(p.CgroupParent, c.ID, c.State == store.ContainerExited)
	row := Container{
		Namespace: p.Namespace, Pod: p.Name, PodUID: p.UID, PodID: p.ID,
		Name: c.Name, ID: c.ID, State: string(c.State),
		QoS:    qos.Class(podInfo, &hooks.ContainerInfo{Annotations: c.Annotations}),
		Cgroup: files.path(),
	}
	row.Cpuset = cpusetField(files, k.version, res.CpusetCpus)
	row.CPUQuota = quotaField(files, k.version, res.CPUQuota, res.CPUPeriod)
	row.CPUShares = sharesField(files, k.version, res.CPUShares)
	var idle string
	if p.Resources != nil {
		idle = p.Resources.Unified["cpu.idle"]
	}
	row.CPUIdle = idleField(k, p.CgroupParent, idle)
	row.MemoryLimit = memoryField(files, k.version, res.MemoryLimitInBytes)
	return row
}

func unread(err error) Field { return Field{Unread: err.Error()} }

func cpusetField(files containerFiles, version int, applied string) Field {
	var kernel string
	var err error
	if version == 2 {
		// cpuset.cpus is empty on v2 until someone writes it; the effective list is what the tasks get.
		if kernel, err = files.read("cpuset", "cpuset.cpus.effective"); err != nil {
			kernel, err = files.read("cpuset", "cpuset.cpus")
		}
	} else {
		kernel, err = files.read("cpuset", "cpuset.cpus")
	}
	f := Field{Applied: applied}
	if err != nil {
		f.Unread = err.Error()
		return f
	}
	f.Kernel = kernel
	if applied != "" {
		ks, kerr := topology.ParseCPUList(kernel)
		as, aerr := topology.ParseCPUList(applied)
		f.Differs = kerr != nil || aerr != nil || !ks.Equals(as)
	}
	return f
}

// quotaField shows quota/period, "max" for no limit; the proxy's zero quota means it set none.
func quotaField(files containerFiles, version int, quota, period int64) Field {
	f := Field{}
	if quota != 0 {
		f.Applied = formatQuota(quota, period)
	}
	var kq, kp int64
	if version == 2 {
		s, err := files.read("cpu", "cpu.max")
		if err != nil {
			return withApplied(unread(err), f.Applied)
		}
		q, p, _ := strings.Cut(s, " ")
		kq = -1
		if q != "max" {
			if kq, err = strconv.ParseInt(q, 10, 64); err != nil {
				return withApplied(unread(fmt.Errorf("cpu.max %q: %w", s, err)), f.Applied)
			}
		}
		if kp, err = strconv.ParseInt(p, 10, 64); err != nil {
			return withApplied(unread(fmt.Errorf("cpu.max %q: %w", s, err)), f.Applied)
		}
	} else {
		var err error
		if kq, err = readInt(files, "cpu", "cpu.cfs_quota_us"); err != nil {
			return withApplied(unread(err), f.Applied)
		}
		if kp, err = readInt(files, "cpu", "cpu.cfs_period_us"); err != nil {
			return withApplied(unread(err), f.Applied)
		}
	}
	f.Kernel = formatQuota(kq, kp)
	if quota != 0 {
		f.Differs = max(kq, -1) != max(quota, -1) || (period > 0 && period != kp)
	}
	return f
}

func withApplied(f Field, applied string) Field {
	f.Applied = applied
	return f
}

func formatQuota(quota, period int64) string {
	q := "max"
	if quota > 0 {
		q = strconv.FormatInt(quota, 10)
	}
	if period <= 0 {
		return q
	}
	return q + "/" + strconv.FormatInt(period, 10)
}

func readInt(files containerFiles, ctrl, name string) (int64, error) {
	s, err := files.read(ctrl, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not a number", name, s)
	}
	return v, nil
}

// sharesField shows cpu.shares on v1 and cpu.weight on v2, where the proxy's shares are converted as
// the runtime converts them.
func sharesField(files containerFiles, version int, shares int64) Field {
	if version == 2 {
		f := Field{}
		if shares > 0 {
			f.Applied = strconv.FormatInt(cgroup.SharesToWeight(shares), 10)
		}
		w, err := readInt(files, "cpu", "cpu.weight")
		if err != nil {
			return withApplied(unread(err), f.Applied)
		}
		f.Kernel = strconv.FormatInt(w, 10)
		// Runtimes before runc 1.3.2 and crun 1.23 map linearly; either is the runtime doing as asked.
		f.Differs = shares > 0 && w != cgroup.SharesToWeight(shares) && w != linearWeight(shares)
		return f
	}
	f := Field{}
	if shares > 0 {
		f.Applied = strconv.FormatInt(shares, 10)
	}
	s, err := readInt(files, "cpu", "cpu.shares")
	if err != nil {
		return withApplied(unread(err), f.Applied)
	}
	f.Kernel = strconv.FormatInt(s, 10)
	f.Differs = shares > 0 && s != shares
	return f
}

// linearWeight is the shares → weight mapping of runtimes before runc 1.3.2 and crun 1.23, which
// still run on many nodes; no maintained library keeps it.
func linearWeight(shares int64) int64 {
	shares = min(max(shares, cgroup.MinShares), cgroup.MaxShares)
	return cgroup.MinWeight + (shares-cgroup.MinShares)*(cgroup.MaxWeight-cgroup.MinWeight)/(cgroup.MaxShares-cgroup.MinShares)
}

func idleField(k *Kernel, parent, applied string) Field {
	f := Field{Applied: applied}
	s, err := k.podFile(parent, "cpu", "cpu.idle")
	if err != nil {
		f.Unread = err.Error()
		return f
	}
	f.Kernel = s
	f.Differs = applied != "" && applied != s
	return f
}

// unlimitedMemory is where cgroup v1 starts to mean "no limit" (it reports 2^63 rounded down to a page).
const unlimitedMemory = 1 << 62

func memoryField(files containerFiles, version int, limit int64) Field {
	f := Field{}
	if limit > 0 {
		f.Applied = formatBytes(limit)
	}
	name := "memory.limit_in_bytes"
	if version == 2 {
		name = "memory.max"
	}
	s, err := files.read("memory", name)
	if err != nil {
		return withApplied(unread(err), f.Applied)
	}
	kernel := int64(-1)
	if s != "max" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return withApplied(unread(fmt.Errorf("%s holds %q, not a number", name, s)), f.Applied)
		}
		if v < unlimitedMemory {
			kernel = v
		}
	}
	f.Kernel = formatBytes(kernel)
	if limit > 0 {
		// The kernel rounds a limit down to whole pages.
		page := int64(os.Getpagesize())
		f.Differs = kernel != limit && kernel != limit/page*page
	}
	return f
}

// formatBytes writes a byte count in the largest binary unit that divides it, "max" for no limit.
func formatBytes(b int64) string {
	if b < 0 {
		return "max"
	}
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 40, "Ti"}, {1 << 30, "Gi"}, {1 << 20, "Mi"}, {1 << 10, "Ki"}} {
		if b >= u.size && b%u.size == 0 {
			return strconv.FormatInt(b/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(b, 10)
}

// Differences counts the values where the kernel and the proxy disagree.
func (p *Pods) Differences() int {
	n := 0
	for _, c := range p.Containers {
		for _, f := range c.fields() {
			if f.Differs {
				n++
			}
		}
	}
	return n
}

func (c *Container) fields() []Field {
	return []Field{c.Cpuset, c.CPUQuota, c.CPUShares, c.CPUIdle, c.MemoryLimit}
}
