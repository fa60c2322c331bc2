// Package agent is Tandem's node agent, shared by its two binaries: tandem-proxy, a CRI proxy that kubelet
// talks to instead of containerd, and tandem-nri, an NRI plugin that containerd calls. Both run the same
// policies on the lifecycle calls and the same node loops (collector, reporter, suppress, evict); only the
// front end that sees the calls differs. This package wires them: flags, configuration, the hooks, the
// loops, /metrics and the debug socket. The NRI front end is passed in by tandem-nri, so tandem-proxy does
// not link containerd/nri (it would grow by 1.9 MB and 1 MiB of RSS at rest).
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/actuate/evict"
	"github.com/tandemkit/tandem/actuate/suppress"
	"github.com/tandemkit/tandem/actuate/yield"
	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/frontend"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/cpuset"
	"github.com/tandemkit/tandem/hooks/policy/podspec"
	"github.com/tandemkit/tandem/hooks/policy/qos"
	"github.com/tandemkit/tandem/hooks/remote"
	"github.com/tandemkit/tandem/internal/flagfile"
	"github.com/tandemkit/tandem/internal/heaprelease"
	"github.com/tandemkit/tandem/internal/supervise"
	"github.com/tandemkit/tandem/kubeclient"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/metrics/headroom"
	"github.com/tandemkit/tandem/metrics/reporter"
	"github.com/tandemkit/tandem/proxy"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/resctrl"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

// Binary describes one of the agent's binaries.
type Binary struct {
	// Name is the binary's name, in flags' help and logs.
	Name string
	// NRI, when set, makes the agent an NRI plugin instead of a CRI proxy.
	NRI func(o NRIOptions, deps frontend.Deps) (Plugin, error)
	// GCPercent is the garbage collector's target (GOGC) when the environment sets none; 0 keeps Go's
	// default of 100.
	GCPercent int
}

// gcPercent says which GOGC the process should run with: b.GCPercent, unless the operator set GOGC
// (which Go has already applied) or the binary asks for Go's default.
func gcPercent(b Binary, lookupEnv func(string) (string, bool)) (int, bool) {
	if _, set := lookupEnv("GOGC"); set || b.GCPercent <= 0 {
		return 0, false
	}
	return b.GCPercent, true
}

// NRIOptions are the NRI plugin's own settings.
type NRIOptions struct {
	Socket, Index  string
	RequestTimeout time.Duration
}

// FrontEnd is what the node loops need of the part that sees the lifecycle calls.
type FrontEnd interface {
	// Store is what it knows of the node's pods and containers.
	Store() *store.Store
	// Refresh moves every live container to what the policies decide now, and returns when done.
	Refresh(ctx context.Context) error
	// Ready says whether the runtime is reachable through it (/readyz).
	Ready(ctx context.Context) error
}

// Plugin is the NRI front end.
type Plugin interface {
	FrontEnd
	// Run serves containerd's events until ctx ends, reconnecting when containerd restarts.
	Run(ctx context.Context) error
}

// Main runs the binary until SIGTERM or SIGINT and exits non-zero on failure.
func Main(b Binary) {
	if pct, ok := gcPercent(b, os.LookupEnv); ok {
		debug.SetGCPercent(pct)
	}
	// Heap profiling samples an allocation every 512 KiB and files each sampled stack in a 1.4-MB table,
	// which the samples of a loaded proxy touch page by page: 0.3 MiB of the agent's 7.3 MiB of anonymous
	// memory at rest (docs/performance.md). So it is off unless asked for with GODEBUG=memprofilerate=N,
	// which Go applied before main; CPU profiles and traces on the debug socket do not need it.
	if !godebugSets(os.Getenv("GODEBUG"), "memprofilerate") {
		runtime.MemProfileRate = 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	err := run(ctx, b, os.Args[1:])
	stop()
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		klog.ErrorS(err, b.Name+" exited")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// godebugSets reports whether the GODEBUG value godebug (comma-separated key=value pairs) sets key.
func godebugSets(godebug, key string) bool {
	for _, kv := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); k == key {
			return true
		}
	}
	return false
}

// option binds one flag to its config-file key and TANDEM_* variable.
type option struct{ flag, key string }

func options() []option {
	return []option{
		{"listen", "listen"},
		{"runtime-endpoint", "runtimeEndpoint"},
		{"image-endpoint", "imageEndpoint"},
		{"state-dir", "stateDir"},
		{"metrics-addr", "metricsAddr"},
		{"debug-socket", "debugSocket"},
		{"socket-mode", "socketMode"},
		{"socket-owner", "socketOwner"},
		{"max-msg-size", "maxMsgSize"},
		{"max-pod-metadata-bytes", "maxPodMetadataBytes"},
		{"max-hook-answer-bytes", "maxHookAnswerBytes"},
		{"max-inflight-bytes", "maxInflightBytes"},
		{"shutdown-timeout", "shutdownTimeout"},
		{"resync-period", "resyncPeriod"},
		{"runtime-timeout", "runtimeTimeout"},
		{"hooks-dir", "hooksDir"},
		{"cgroup-root", "cgroupRoot"},
		{"policies", "policies"},
		{"sysfs-root", "sysfsRoot"},
		{"reserved-cpus", "reservedCPUs"},
		{"slo-config", "sloConfig"},
		{"slo-configmap", "sloConfigMap"},
		{"kubelet-cgroup-root", "kubeletCgroupRoot"},
		{"node-labels", "nodeLabels"},
		{"kubeconfig", "kubeconfig"},
		{"node-name", "nodeName"},
		{"pod-spec-wait", "podSpecWait"},
		{"kubelet-config", "kubeletConfig"},
		{"cgroup-driver", "cgroupDriver"},
		{"cpu-manager-policy", "cpuManagerPolicy"},
		{"run-queue-latency", "runQueueLatency"},
		{"run-queue-interval", "runQueueInterval"},
		{"heap-release-interval", "heapReleaseInterval"},
	}
}

// nriOptions are tandem-nri's own flags.
func nriOptions() []option {
	return []option{{"nri-socket", "nriSocket"}, {"nri-plugin-index", "nriPluginIndex"}, {"nri-request-timeout", "nriRequestTimeout"}}
}

// proxyOnly are the flags an NRI plugin has no use for: it serves no CRI socket. tandem-nri accepts and
// hides them, so one config file can serve both binaries.
var proxyOnly = []string{"listen", "image-endpoint", "socket-mode", "socket-owner", "max-msg-size", "max-inflight-bytes", "shutdown-timeout", "resync-period"}

// flagValues reads the flags, once resolved, by their config-file keys.
type flagValues struct {
	fs    *pflag.FlagSet
	flags map[string]string // key → flag
}

// The flags' types are fixed where they are defined: a getter of the wrong type is a programming error,
// which the tests of load catch as a zero value.

func (v flagValues) GetString(key string) string {
	s, _ := v.fs.GetString(v.flags[key])
	return s
}

func (v flagValues) GetStringSlice(key string) []string {
	s, _ := v.fs.GetStringSlice(v.flags[key])
	return s
}

func (v flagValues) GetInt(key string) int {
	i, _ := v.fs.GetInt(v.flags[key])
	return i
}

func (v flagValues) GetInt64(key string) int64 {
	i, _ := v.fs.GetInt64(v.flags[key])
	return i
}

func (v flagValues) GetBool(key string) bool {
	b, _ := v.fs.GetBool(v.flags[key])
	return b
}

func (v flagValues) GetDuration(key string) time.Duration {
	d, _ := v.fs.GetDuration(v.flags[key])
	return d
}

// settings is what the command line, environment and config file resolve to.
type settings struct {
	proxy       proxy.Config
	hookLimits  hooks.Limits
	metricsAddr string
	// debugSocket serves /debug/*, to root alone.
	debugSocket string
	configFile  string
	hooksDir    string
	cgroupRoot  string
	policy      policy.Config
	sysfsRoot   string
	cpus        alloc.Config
	sloConfig   string
	// sloConfigMap is namespace/name of the slo-controller-config read through the API when sloConfig is empty.
	sloConfigMap string
	// beParent is the BE pods' parent cgroup under kubelet's cgroupRoot.
	beParent string
	// kubeletCgroupRoot is kubelet's cgroupRoot (cgroupfs driver).
	kubeletCgroupRoot string
	nodeLabels        map[string]string
	podSpec           podspec.Config
	// apiRetry is how often the proxy looks again for its kubeconfig and the API server while standalone.
	apiRetry time.Duration
	// colocation is the slo-config resolved for this node, swapped on reload; the reporter reads it.
	colocation *atomic.Pointer[slo.Resolved]
	// nri holds tandem-nri's own settings.
	nri NRIOptions
	// kubeletConfig is --kubelet-config, kubelet's configuration file when no running kubelet is found.
	kubeletConfig string
	// kubelet is kubelet's cgroup driver (cgroupfs or systemd) and CPU manager policy (none or
	// static) as resolved at start, with where each came from.
	kubelet kubeletFound
	// runQueue switches on the eBPF run-queue latency collector; runQueueInterval is how often it drains
	// its maps.
	runQueue         bool
	runQueueInterval time.Duration
	// heapRelease is how often the agent looks whether to give its free heap back; 0 never.
	heapRelease time.Duration
}

// load resolves flags over TANDEM_* variables over the config file over defaults. procRoot is procfs,
// where a running kubelet's settings are looked for.
func load(b Binary, args []string, getenv func(string) string, procRoot string) (settings, error) {
	def := proxy.DefaultConfig()
	fs := pflag.NewFlagSet(b.Name, pflag.ContinueOnError)
	fs.String("config", "", "YAML or JSON config file; its keys are the camelCase forms of these flags (runtimeEndpoint, stateDir, ...)")
	fs.String("listen", def.Listen, "unix socket that kubelet connects to (--container-runtime-endpoint=unix://<this>)")
	fs.String("runtime-endpoint", def.RuntimeEndpoint, "CRI endpoint of the container runtime")
	fs.String("image-endpoint", "", "CRI endpoint for the ImageService (default: --runtime-endpoint)")
	fs.String("state-dir", def.StateDir, "directory for the store checkpoint")
	fs.String("metrics-addr", "127.0.0.1:9316", "address for /metrics, /healthz and /readyz; empty disables")
	fs.String("debug-socket", "", "unix socket, root's alone, serving /debug/store, /debug/pools and Go's profiles at /debug/pprof/ (default <state-dir>/debug.sock)")
	fs.String("socket-mode", fmt.Sprintf("%04o", def.SocketMode), "permission bits of the listen socket, octal")
	fs.String("socket-owner", "", "numeric uid:gid of the listen socket (default: the owner of the runtime socket)")
	fs.Int("max-msg-size", def.MaxMsgSize, "largest gRPC message accepted or sent, in bytes (kubelet uses 16 MiB)")
	fs.Int("max-pod-metadata-bytes", hooks.DefaultMaxMetadataBytes, "largest labels + annotations (keys and values) of a pod or container, as kubelet sends them and after each hook's answer; past it the call or the answer is refused")
	fs.Int("max-hook-answer-bytes", hooks.DefaultLimits().MaxAnswerBytes, "most bytes one hook's answer may add or change; past it the answer counts as that hook failing")
	fs.Int64("max-inflight-bytes", proxy.DefaultMaxInflightBytes, "bytes of lifecycle requests held at once (at least --max-msg-size); past it a call waits, within its deadline")
	fs.Duration("shutdown-timeout", def.ShutdownTimeout, "how long in-flight calls may finish after SIGTERM")
	fs.Duration("resync-period", def.ResyncPeriod, "how often the store is reconciled with the runtime")
	fs.Duration("runtime-timeout", def.RuntimeTimeout, "timeout of the proxy's own calls to the runtime (recovery, resync)")
	fs.String("hooks-dir", "/etc/tandem/hooks.d", "directory of remote hook server registrations (*.json; Koordinator's hookserver.d files are accepted too), reloaded on change")
	fs.String("cgroup-root", "/sys/fs/cgroup", "cgroup mount, for the pod-level settings hooks ask for")
	fs.StringSlice("policies", policy.Names(), "built-in policies to run, in their fixed order; empty runs none")
	fs.String("sysfs-root", "/sys", "sysfs mount, for the CPU topology")
	fs.String("reserved-cpus", "", "CPUs never handed to pods (a cpu list such as 0-1), as kubelet's --reserved-cpus")
	fs.String("slo-config", "", "Koordinator slo-controller-config as a file (the ConfigMap YAML, or a file of its sections), for a standalone node; when set it is the source instead of --slo-configmap; reloaded on change")
	fs.String("slo-configmap", source.DefaultConfigMap, "namespace/name of Koordinator's slo-controller-config ConfigMap, read and watched through the API server and matched against this Node's labels; empty disables")
	fs.StringToString("node-labels", nil, "this node's labels, for the nodeStrategies selectors of --slo-config (k=v,...); with --slo-configmap the Node's own labels are used")
	fs.String("kubelet-cgroup-root", "/", "kubelet's cgroupRoot: the BE pods' parent cgroup is <this>/kubepods/besteffort")
	hostname, _ := os.Hostname()
	fs.String("kubeconfig", "", "kubeconfig for the API server (kubelet's own, /etc/kubernetes/kubelet.conf on kubeadm); until it exists and the server answers the proxy serves CRI standalone; empty uses the in-cluster configuration, and without either the proxy runs standalone")
	// Kubelet registers the node under its lowercased hostname unless told otherwise.
	fs.String("node-name", strings.ToLower(hostname), "this node's name as kubelet registers it")
	fs.Duration("pod-spec-wait", podspec.DefaultConfig().Wait, "how long a lookup waits for a pod the informer has not delivered yet, before one direct GET")
	fs.String("kubelet-config", defaultKubeletConfig, "kubelet's configuration file, read at start for its cgroupDriver and cpuManagerPolicy unless --cgroup-driver and --cpu-manager-policy say them; when set, it is read instead of the running kubelet's files, and otherwise it is read only when not exactly one kubelet runs; a missing file means kubelet's defaults (cgroupfs, none)")
	fs.String("cgroup-driver", "", "kubelet's cgroup driver, cgroupfs or systemd (default: the running kubelet's, from its --config, --config-dir and flags; else from --kubelet-config)")
	fs.String("cpu-manager-policy", "", "kubelet's CPU manager policy, none or static (default: the running kubelet's, from its --config, --config-dir and flags; else from --kubelet-config); under static, Guaranteed pods are LSR and keep the CPUs kubelet gave them")
	fs.Bool("run-queue-latency", false, "measure each container's run-queue latency with eBPF (tandem_container_runqueue_*; needs tracefs and BPF, Linux 5.8+)")
	fs.Duration("run-queue-interval", collector.DefaultConfig().RunQueue.Interval, "how often --run-queue-latency drains its per-container histograms into the metrics (a shorter interval follows bursts closer and wakes the agent more often)")
	fs.Duration("heap-release-interval", heaprelease.DefaultInterval, "how often the agent checks whether it is quiet (allocated less than one heap goal since the last check) and then gives its free heap memory back to the kernel; 0 leaves it to Go's runtime")
	opts := options()
	if b.NRI != nil {
		fs.String("nri-socket", defaultNRISocket, "containerd's NRI socket (containerd 1.7 or later, with NRI enabled)")
		fs.String("nri-plugin-index", "40", "two digits: where Tandem runs among NRI plugins, lowest first")
		fs.Duration("nri-request-timeout", 2*time.Second, "containerd's plugin_request_timeout: Tandem answers each event within it, so containerd never drops it")
		for _, f := range proxyOnly {
			_ = fs.MarkHidden(f)
		}
		opts = append(opts, nriOptions()...)
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}

	configFile, _ := fs.GetString("config")
	if configFile == "" {
		configFile = getenv("TANDEM_CONFIG")
	}
	bindings := make([]flagfile.Binding, 0, len(opts))
	for _, o := range opts {
		bindings = append(bindings, flagfile.Binding{Flag: o.flag, Key: o.key, Env: "TANDEM_" + strings.ToUpper(strings.ReplaceAll(o.flag, "-", "_"))})
	}
	// One config file serves tandem-proxy and tandem-nri: tandem-proxy accepts tandem-nri's keys.
	var ignored []string
	if b.NRI == nil {
		for _, o := range nriOptions() {
			ignored = append(ignored, o.key)
		}
	}
	if err := flagfile.Apply(fs, bindings, flagfile.Source{File: configFile, Getenv: getenv, Ignored: ignored}); err != nil {
		return settings{}, fmt.Errorf("invalid configuration: %w", err)
	}
	v := flagValues{fs: fs, flags: map[string]string{}}
	for _, o := range opts {
		v.flags[o.key] = o.flag
	}
	cfg, err := configFrom(v)
	if err != nil {
		return settings{}, err
	}
	pol := policy.DefaultConfig()
	pol.Enabled = v.GetStringSlice("policies")
	if err := pol.Validate(); err != nil {
		return settings{}, fmt.Errorf("invalid configuration: %w", err)
	}
	cpus := alloc.DefaultConfig()
	if r := v.GetString("reservedCPUs"); r != "" {
		set, err := topology.ParseCPUList(r)
		if err != nil {
			return settings{}, fmt.Errorf("invalid configuration: reserved-cpus %q: %w", r, err)
		}
		cpus.Reserved = set
	}
	labels, err := fs.GetStringToString("node-labels")
	if err != nil {
		return settings{}, err
	}
	// The hooks' metadata bound is the proxy's: a hook may not take a pod past what kubelet may send.
	limits := hooks.Limits{MaxAnswerBytes: v.GetInt("maxHookAnswerBytes"), MaxMetadataBytes: cfg.MaxPodMetadataBytes}
	if limits.MaxMetadataBytes == 0 {
		limits.MaxMetadataBytes = hooks.DefaultMaxMetadataBytes
	}
	if err := limits.Validate(); err != nil {
		return settings{}, fmt.Errorf("invalid configuration: %w", err)
	}
	st := settings{proxy: cfg, hookLimits: limits, metricsAddr: v.GetString("metricsAddr"), debugSocket: v.GetString("debugSocket"), configFile: configFile,
		hooksDir: v.GetString("hooksDir"), cgroupRoot: v.GetString("cgroupRoot"), policy: pol,
		sysfsRoot: v.GetString("sysfsRoot"), cpus: cpus, sloConfig: v.GetString("sloConfig"), nodeLabels: labels}
	if st.debugSocket == "" {
		// Beside the checkpoint, which holds the same pods: every proxy has a state dir of its own, which
		// the proxy creates 0700.
		st.debugSocket = filepath.Join(cfg.StateDir, debugSocketName)
	}
	st.podSpec = podspec.DefaultConfig()
	st.podSpec.Kubeconfig = v.GetString("kubeconfig")
	st.podSpec.NodeName = v.GetString("nodeName")
	st.podSpec.Wait = v.GetDuration("podSpecWait")
	st.kubeletConfig = v.GetString("kubeletConfig")
	st.kubelet, err = resolveKubelet(kubeletQuery{procRoot: procRoot, file: st.kubeletConfig, fileSet: fs.Changed("kubelet-config"),
		cgroupDriver: v.GetString("cgroupDriver"), cpuManagerPolicy: v.GetString("cpuManagerPolicy")})
	if err != nil {
		return settings{}, fmt.Errorf("invalid configuration: %w", err)
	}
	st.runQueue = v.GetBool("runQueueLatency")
	st.runQueueInterval = v.GetDuration("runQueueInterval")
	st.heapRelease = v.GetDuration("heapReleaseInterval")
	if st.heapRelease < 0 {
		return settings{}, fmt.Errorf("heap-release-interval %v: want 0 (off) or a positive duration such as 10s", st.heapRelease)
	}
	// Under kubelet's static CPU manager its Guaranteed pods hold exclusive CPUs: LSR, with kubelet's CPUs.
	st.policy.QoS.StaticCPUManager = st.kubelet.cpuManagerPolicy == cpuManagerStatic
	if err := st.podSpec.Validate(); err != nil {
		return settings{}, fmt.Errorf("invalid configuration: %w", err)
	}
	st.sloConfigMap = v.GetString("sloConfigMap")
	st.kubeletCgroupRoot = path.Join("/", v.GetString("kubeletCgroupRoot"))
	st.beParent = path.Join(st.kubeletCgroupRoot, "kubepods/besteffort")
	if st.kubelet.cgroupDriver == cgroupDriverSystemd {
		// Kubelet's systemd driver names its QoS cgroups as slices (cgroup.Path expands them); its
		// cgroupRoot is a cgroupfs notion.
		st.beParent = "kubepods-besteffort.slice"
	}
	st.apiRetry = 3 * time.Second
	// The slo-config's content is not read here: whatever it says, the proxy starts (config/slo/source
	// refuses a bad section alone, and runs Koordinator's defaults until a good one comes).
	st.colocation = &atomic.Pointer[slo.Resolved]{}
	resolved, err := slo.DefaultConfig().ForNode(st.nodeLabels)
	if err != nil {
		return settings{}, err
	}
	st.colocation.Store(&resolved)
	if b.NRI != nil {
		st.nri = NRIOptions{Socket: v.GetString("nriSocket"), Index: v.GetString("nriPluginIndex"), RequestTimeout: v.GetDuration("nriRequestTimeout")}
	}
	return st, nil
}

// defaultNRISocket is where containerd serves NRI unless its config says otherwise.
const defaultNRISocket = "/var/run/nri/nri.sock"

func run(ctx context.Context, b Binary, args []string) error {
	st, err := load(b, args, os.Getenv, "/proc")
	if err != nil {
		return err
	}
	cfg := st.proxy
	logger := klog.Background().WithName(b.Name)
	ctx = klog.NewContext(ctx, logger)
	if b.NRI != nil {
		logger.Info("Starting", "nriSocket", st.nri.Socket, "runtimeEndpoint", cfg.RuntimeEndpoint, "stateDir", cfg.StateDir, "config", st.configFile)
	} else {
		logger.Info("Starting", "listen", cfg.Listen, "runtimeEndpoint", cfg.RuntimeEndpoint, "stateDir", cfg.StateDir, "config", st.configFile)
	}
	// What the runtime runs with, read back from it: Main set these unless the environment did.
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	gcTarget := strconv.FormatInt(int64(gogc[0].Value.Uint64()), 10) // GOGC=off reads as -1
	if gcTarget == "-1" {
		gcTarget = "off"
	}
	logger.Info("Go runtime settings; GOGC and GODEBUG=memprofilerate=N in the environment override them",
		"gogc", gcTarget, "heapProfileRate", runtime.MemProfileRate)
	logger.Info("Kubelet settings followed", "cgroupDriver", st.kubelet.cgroupDriver, "cgroupDriverFrom", st.kubelet.cgroupDriverFrom,
		"cpuManagerPolicy", st.kubelet.cpuManagerPolicy, "cpuManagerPolicyFrom", st.kubelet.cpuManagerPolicyFrom,
		"lookup", st.kubelet.lookup, "guaranteedPodsAreLSR", st.policy.QoS.StaticCPUManager)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cgroups, err := cgroup.New(st.cgroupRoot)
	if err != nil {
		// Pod-level settings are optional: the proxy still forwards and runs container-level policies.
		logger.Info("No cgroup hierarchy; pod-level settings from hooks will not be applied", "cgroupRoot", st.cgroupRoot, "err", err)
		cgroups = nil
	}
	var cpus *alloc.Allocator
	if topo, err := topology.Discover(st.sysfsRoot); err != nil {
		logger.Error(err, "No CPU topology; the cpuset policy is off", "sysfsRoot", st.sysfsRoot)
	} else if cpus, err = alloc.New(topo, st.cpus); err != nil {
		return fmt.Errorf("cpuset allocator: %w", err)
	}
	// The cpuset policy asks for a refresh when exclusive CPUs come or go; one pending request is enough.
	refresh := make(chan struct{}, 1)
	var srv *proxy.Server
	// The resctrl policy names a container's RDT class; the proxy moves its tasks there.
	var rdt frontend.RDT
	if cgroups != nil {
		if fs, err := resctrl.Open(resctrl.DefaultRoot); err == nil {
			rdt = resctrl.CgroupMover{FS: fs, CgroupRoot: st.cgroupRoot, CgroupVersion: cgroups.Version()}
		}
	}
	// The pools changed: the host application loop passes at once; one pending notice is enough.
	poolsKick := make(chan struct{}, 1)
	// A BE container started: the BE thread scheduling loop sweeps at once; one pending notice is enough.
	beStarted := make(chan struct{}, 1)
	policyDeps := policy.Deps{
		Cgroups: cgroups,
		CPUSet:  cpus,
		BEStarted: func() {
			select {
			case beStarted <- struct{}{}:
			default:
			}
		},
		PoolsChanged: func() {
			for _, ch := range []chan struct{}{refresh, poolsKick} {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		},
	}
	cons := &consumers{base: st.policy, deps: policyDeps, colocation: st.colocation, resolved: *st.colocation.Load(), firstApplied: make(chan struct{})}
	builtin := cons.builtin(ctx)
	dispatcher, err := hooks.NewDispatcher(ctx, builtin, reg)
	if err != nil {
		return err
	}
	if err := dispatcher.SetLimits(st.hookLimits); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	cons.dispatcher = dispatcher
	for _, h := range dispatcher.Hooks() {
		logger.Info("Hook in force", "hook", h.Name, "order", h.Order, "stages", h.Stages, "failurePolicy", h.FailurePolicy, "remote", h.Remote)
	}
	// Remote hooks are in force before the first call is served; the watcher then follows the directory.
	loader := remote.NewLoader(remote.LoaderConfig{Dir: st.hooksDir, Builtin: builtin})
	defer loader.Close()
	if regs, err := loader.Load(ctx); err != nil {
		logger.Error(err, "Hook directory not loaded; starting without remote hooks", "hooksDir", st.hooksDir)
	} else if err := dispatcher.SetRemote(ctx, regs); err != nil {
		logger.Error(err, "Remote hooks rejected; starting without them", "hooksDir", st.hooksDir)
	}
	// Every loop started below runs under one group and ends when ctx does; one that stops earlier is
	// logged and started again, and /healthz names it meanwhile. On the way out the proxy waits for them
	// before it closes the runtime connection: the suppress loop lifts its clamp through it.
	ctx, cancel := context.WithCancel(ctx)
	loops, err := supervise.New(ctx, reg, supervise.Backoff())
	if err != nil {
		cancel()
		return err
	}
	defer func() {
		cancel()
		loops.Wait()
		if srv != nil {
			_ = srv.Close()
		}
	}()
	// A file source is read before the first call is served, so the policies start with its settings.
	var fileSource *source.Source
	if st.sloConfig != "" {
		applied := make(chan struct{})
		var once sync.Once
		fileSource, err = source.New(source.Config{File: st.sloConfig, NodeName: st.podSpec.NodeName, NodeLabels: st.nodeLabels},
			source.Deps{Apply: func(ctx context.Context, u source.Update) { cons.apply(ctx, u); once.Do(func() { close(applied) }) }})
		if err != nil {
			return err
		}
		loops.Go("slo-config-file", fileSource.Run)
		select {
		case <-applied:
		case <-ctx.Done():
		}
	}
	// A watcher that cannot watch (inotify instances exhausted) is started again until it can.
	loops.Go("hooks-dir", remote.NewWatcher(loader, dispatcher.SetRemote).Run)
	// The front end: the CRI proxy, or the NRI plugin. Either way the exclusive CPUs of the containers it
	// finds are restored before the first call is handled, so the pools, /debug/pools and the policies see
	// them from the start.
	restore := func(ctx context.Context, snap *store.Snapshot) {
		if n := restoreExclusive(ctx, cpus, snap); n > 0 {
			p := cpus.Pools()
			logger.Info("Exclusive CPUs of recovered containers restored", "count", n, "lse", p.LSE.String(), "lsr", p.LSR.String(), "ls", p.LS.String(), "be", p.BE.String())
			policyDeps.PoolsChanged()
		}
	}
	var fe FrontEnd
	var serve func(context.Context) error
	// Without the API server, eviction stops the pod through the runtime.
	var stopper evict.SandboxStopper
	if b.NRI != nil {
		plugin, err := b.NRI(st.nri, frontend.Deps{Hooks: dispatcher, Cgroups: cgroups, RDT: rdt, Registerer: reg, Refresh: refresh, Synchronized: restore})
		if err != nil {
			return err
		}
		rt, err := newRuntimeStopper(cfg.RuntimeEndpoint)
		if err != nil {
			return err
		}
		defer rt.Close()
		fe, serve, stopper = plugin, plugin.Run, rt
	} else {
		srv, err = proxy.New(cfg, frontend.Deps{Hooks: dispatcher, Cgroups: cgroups, RDT: rdt, Registerer: reg, Refresh: refresh})
		if err != nil {
			return err
		}
		if err := srv.Recover(ctx); err != nil {
			return err
		}
		restore(ctx, srv.Store().Snapshot())
		lis, err := proxy.Listen(ctx, cfg)
		if err != nil {
			return err
		}
		// Closed by Serve; closed here if the agent fails before.
		served := false
		defer func() {
			if !served {
				_ = lis.Close()
			}
		}()
		fe, stopper = srv, srv
		serve = func(ctx context.Context) error { served = true; return srv.Serve(ctx, lis) }
	}

	if st.metricsAddr != "" {
		var lc net.ListenConfig
		mlis, err := lc.Listen(ctx, "tcp", st.metricsAddr)
		if err != nil {
			return fmt.Errorf("listen on --metrics-addr %s (choose a free address, or empty to disable): %w", st.metricsAddr, err)
		}
		logger.Info("Serving metrics and health", "addr", mlis.Addr().String())
		defer serveHTTP(ctx, mlis, metricsMux(fe, reg, loops))()
	}
	dlis, err := listenDebug(ctx, st.debugSocket)
	if err != nil {
		return err
	}
	logger.Info("Serving the debug endpoints to root", "socket", st.debugSocket)
	_, canYield := yield.Mechanism()
	vm, vmWhy := headroom.DetectVM("/proc", "/sys")
	facts := nodeFacts{cgroups: cgroups, resctrl: rdt != nil, yield: canYield, policies: st.policy.Enabled, vm: vm, vmWhy: vmWhy, runQueue: st.runQueue}
	hr, err := newHeadroom(ctx, st, vm, vmWhy, reg)
	if err != nil {
		return err
	}
	// The node loops: measure, suppress and evict; where connected, publish what batch work may reclaim.
	col, err := collector.New(collectorConfig(st), collector.Deps{ProcRoot: "/proc", CgroupRoot: st.cgroupRoot,
		Targets: collectorTargets(fe.Store(), st.policy.QoS.StaticCPUManager), Registerer: reg})
	if err != nil {
		return err
	}
	lw, err := newLSWaitGuard(ctx, st, col, reg, cons)
	if err != nil {
		return err
	}
	dmux := debugMux(fe, cpus)
	dmux.Handle("/debug/config", configHandler(st.podSpec.NodeName, cons, facts))
	dmux.Handle("/debug/headroom", statusHandler(func() any { return hr.Status() }))
	dmux.Handle("/debug/interference", statusHandler(func() any { return lw.Status() }))
	defer serveHTTP(ctx, dlis, dmux)()
	loops.Go("collector", col.Run)
	loops.Go("heap-release", heaprelease.New(st.heapRelease).Run)
	evictor := newSwitchEvictor(evict.NewCRIEvictor(stopper))
	if err := startNodeLoops(ctx, loops, st, col, cpus, cgroups, policyDeps.PoolsChanged, evictor, fe, reg, cons, []suppress.Limiter{hr, lw}); err != nil {
		return err
	}
	cons.setHeadroom(ctx, hr, headroom.DefaultConfig(), vm, vmWhy)
	if err := startYield(ctx, loops, st, cgroups, beStarted, reg, cons); err != nil {
		return err
	}
	if err := startHostApps(ctx, loops, st, cgroups, cpus, col, poolsKick, cons); err != nil {
		return err
	}
	if err := startQuotaBurst(ctx, loops, st, col, cpus, cgroups, fe, reg, cons); err != nil {
		return err
	}
	startMemoryQoS(ctx, cons, policyDeps.Cgroups)
	if err := startSysConfig(ctx, loops, st, reg, cons); err != nil {
		return err
	}
	startBlkIO(ctx, loops, st, cgroups, cons)
	// API access comes when it can: the CRI socket never waits for it.
	loops.Once("connect-api", func(ctx context.Context) error {
		if client := connectAPI(ctx, st.podSpec.Kubeconfig, st.podSpec.NodeName, st.apiRetry); client != nil {
			startAPI(ctx, loops, st, client, cons, evictor, fileSource, col, fe, reg, lowestCeiling(hr, lw))
		}
		return nil
	})
	return serve(ctx)
}

// startAPI starts what needs the API server, once it answers: this node's pod specs for the policies,
// evictions through the Eviction API, the node reporter and, without a file, the slo-controller-config
// ConfigMap.
func startAPI(ctx context.Context, loops *supervise.Group, st settings, client *kubeclient.Client, cons *consumers, evictor *switchEvictor,
	fileSource *source.Source, col *collector.Collector, fe FrontEnd, reg prometheus.Registerer, beCeiling func() (int64, bool)) {
	logger := klog.FromContext(ctx)
	if pods, err := podspec.NewForClient(client, st.podSpec); err != nil {
		logger.Error(err, "Pod specs not read; batch resources come from annotations only")
	} else {
		loops.Go("pod-specs", func(ctx context.Context) error { pods.Run(ctx); return nil })
		cons.setPodSpecs(ctx, func(d *policy.Deps) { d.BatchResources, d.MemoryRequests = pods, pods })
	}
	evictor.set(evict.NewAPIEvictor(client, st.podSpec.NodeName))
	switch {
	case fileSource != nil:
		fileSource.SetClient(client)
	case st.sloConfigMap != "":
		src, err := source.New(source.Config{ConfigMap: st.sloConfigMap, NodeName: st.podSpec.NodeName},
			source.Deps{Client: client, Apply: cons.apply})
		if err != nil {
			logger.Error(err, "slo-controller-config not followed; Koordinator's defaults apply")
			// The reporter must not wait for a configuration that will never come.
			cons.releaseFirst()
		} else {
			loops.Go("slo-configmap", src.Run)
		}
	}
	rep, err := reporter.New(reporter.Config{NodeName: st.podSpec.NodeName}, reporter.Deps{
		Client: client, Samples: reporter.SamplesFrom(col), Requests: podRequests(fe.Store(), st.policy.QoS.StaticCPUManager),
		Settings: func() slo.ColocationSettings { return st.colocation.Load().Colocation }, Registerer: reg,
		BECeiling: beCeiling,
	})
	if err != nil {
		logger.Error(err, "Node reporter not started")
		return
	}
	loops.Go("reporter", func(ctx context.Context) error {
		// Publish only what the operator's configuration says (see consumers.firstApplied). A node with
		// neither a file nor a ConfigMap has its defaults from the start.
		if fileSource != nil || st.sloConfigMap != "" {
			select {
			case <-cons.firstApplied:
			case <-ctx.Done():
				return nil
			}
		}
		return rep.Run(ctx)
	})
}

// collectorConfig starts the collectors at their default pace (usage every second); the consumers switch
// usage sampling to suppressInterval while resource-threshold-config is enabled and back when it is not.
func collectorConfig(st settings) collector.Config {
	c := collector.DefaultConfig()
	c.NodeName = st.podSpec.NodeName
	c.RunQueue.Enabled = st.runQueue
	if st.runQueueInterval > 0 {
		c.RunQueue.Interval = st.runQueueInterval
	}
	c.TracefsRoot = collector.FindTracefs(func(p string) bool { _, err := os.Stat(p); return err == nil })
	return c
}

// restoreExclusive gives the recovered containers their exclusive CPUs back; a nil allocator (no
// topology) restores nothing.
func restoreExclusive(ctx context.Context, cpus *alloc.Allocator, snap *store.Snapshot) int {
	if cpus == nil {
		return 0
	}
	return cpuset.Restore(ctx, cpus, recordedCPUs(snap))
}

// recordedCPUs lists the exclusive cpusets live containers hold, from the store the proxy rebuilt.
func recordedCPUs(snap *store.Snapshot) []cpuset.Recorded {
	pods := map[string]*store.Pod{}
	for _, p := range snap.Pods {
		pods[p.ID] = p
	}
	var out []cpuset.Recorded
	for _, c := range snap.Containers {
		class := qos.Class(&hooks.PodInfo{}, &hooks.ContainerInfo{Annotations: c.Annotations})
		if !class.Exclusive() || c.Resources == nil || c.Resources.CpusetCpus == "" || c.State == store.ContainerExited {
			continue
		}
		p, ok := pods[c.PodSandboxID]
		if !ok {
			continue
		}
		out = append(out, cpuset.Recorded{PodUID: p.UID, Container: c.Name, ContainerID: c.ID, Class: class, CPUs: c.Resources.CpusetCpus})
	}
	return out
}

func configFrom(v flagValues) (proxy.Config, error) {
	mode, err := strconv.ParseUint(v.GetString("socketMode"), 8, 32)
	if err != nil {
		return proxy.Config{}, fmt.Errorf("socket-mode %q: want octal permission bits such as 0660: %w", v.GetString("socketMode"), err)
	}
	cfg := proxy.Config{
		Listen:              v.GetString("listen"),
		RuntimeEndpoint:     v.GetString("runtimeEndpoint"),
		ImageEndpoint:       v.GetString("imageEndpoint"),
		StateDir:            v.GetString("stateDir"),
		SocketMode:          uint32(mode),
		SocketOwner:         v.GetString("socketOwner"),
		MaxMsgSize:          v.GetInt("maxMsgSize"),
		MaxPodMetadataBytes: v.GetInt("maxPodMetadataBytes"),
		MaxInflightBytes:    v.GetInt64("maxInflightBytes"),
		ShutdownTimeout:     v.GetDuration("shutdownTimeout"),
		ResyncPeriod:        v.GetDuration("resyncPeriod"),
		RuntimeTimeout:      v.GetDuration("runtimeTimeout"),
	}
	if err := cfg.Validate(); err != nil {
		return proxy.Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}

// metricsMux serves what any local user, or Prometheus over the network, may read.
// statusHandler serves a loop's status as indented JSON, for tandemctl.
func statusHandler(status func() any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
}

func metricsMux(fe FrontEnd, reg *prometheus.Registry, loops *supervise.Group) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	// Healthy while every node loop runs: the CRI path does not depend on them, but colocation does.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := loops.Check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := fe.Ready(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// debugMux serves what only root may read: the store holds every pod's labels and annotations, and
// annotations carry secrets (kubectl apply's last-applied-configuration holds a whole Secret's data).
func debugMux(fe FrontEnd, cpus *alloc.Allocator) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/store", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(fe.Store().Snapshot())
	})
	mux.HandleFunc("/debug/pools", func(w http.ResponseWriter, _ *http.Request) {
		if cpus == nil {
			http.Error(w, "the cpuset policy is off: no CPU topology", http.StatusNotFound)
			return
		}
		p := cpus.Pools()
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{
			"lse": p.LSE.String(), "lsr": p.LSR.String(), "ls": p.LS.String(), "be": p.BE.String(),
			"allocations": cpus.Allocations(),
		})
	})
	// Go's profiles, so that what the proxy costs a node can be profiled where it runs (go tool pprof
	// against this socket, docs/performance.md). Root's alone like the rest: a profile shows call paths.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// serveHTTP serves h on lis until the returned func shuts it down, which also closes lis (and removes
// a unix socket).
func serveHTTP(ctx context.Context, lis net.Listener, h http.Handler) func() {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "HTTP server stopped", "addr", lis.Addr().String())
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}
}

// debugSocketName is the debug socket's name in the state dir, unless --debug-socket says otherwise.
const debugSocketName = "debug.sock"

// listenDebug listens on the debug socket, which only root can connect to: mode 0600, owned by the
// proxy's user, in a directory made 0700 when the proxy creates it. That is how containerd serves its
// debug socket and kubelet its pod-resources socket; a unix socket's permissions are the one check
// that costs no authentication code and cannot be reached from the network. A socket left by a proxy
// that was killed is replaced; one another process answers on is refused.
func listenDebug(ctx context.Context, path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the directory of --debug-socket %s: %w", path, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("inspect the directory of --debug-socket %s: %w", path, err)
	}
	// Whoever can write the directory can put a socket of theirs in the proxy's place.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && ((st.Uid != 0 && int(st.Uid) != os.Geteuid()) || st.Mode&0o022 != 0) {
		return nil, fmt.Errorf("--debug-socket %s: its directory is owned by uid %d with mode %04o, so others could serve in its place; chown root and chmod go-w %s, or choose another --debug-socket",
			path, st.Uid, st.Mode&0o7777, dir)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("--debug-socket %s exists and is not a socket; move it away or choose another --debug-socket", path)
		}
		d := net.Dialer{Timeout: time.Second}
		if conn, err := d.DialContext(ctx, "unix", path); err == nil {
			_ = conn.Close()
			return nil, fmt.Errorf("another tandem-proxy answers on --debug-socket %s; stop it, or give each proxy its own --state-dir", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove the stale --debug-socket %s: %w", path, err)
		}
		klog.FromContext(ctx).Info("Removed a stale debug socket", "socket", path)
	}
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on --debug-socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("make --debug-socket %s root's alone: %w", path, err)
	}
	return lis, nil
}
