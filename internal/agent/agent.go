// Package agent is Tandem's node agent, shared by its two binaries: tandem-proxy, a CRI proxy that kubelet
// talks to instead of containerd, and tandem-nri, an NRI plugin that containerd calls. Both run the same
// policies on the lifecycle calls and the same node loops (collector, reporter, suppress, evict); only the
// front end that sees the calls differs. This package wires them: flags, configuration, the hooks, the
// loops, /metrics and the debug socket. The NRI front end is passed in by tandem-nri, so tandem-proxy does
// not link containerd/nri (it would grow by 1.9 MB and 1 MiB of RSS at rest).
package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/podspec"
	"github.com/tandemkit/tandem/internal/flagfile"
	"github.com/tandemkit/tandem/internal/heaprelease"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/proxy"
	"github.com/tandemkit/tandem/resource/cgroup"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/topology"
	"github.com/tandemkit/tandem/store"
)

// Binary describes one of the agent's binaries.
type Binary struct {
	// Name is the binary's name, in flags' help and logs.
	Name string
	// NRI, when set, makes the agent an NRI plugin instead of a CRI proxy.
	NRI func(o NRIOptions, deps FrontEndDeps) (Plugin, error)
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

// FrontEndDeps are what the NRI front end is given; the proxy gets the same in proxy.Deps.
type FrontEndDeps struct {
	Hooks      *hooks.Dispatcher
	Cgroups    cgroup.Writer
	RDT        proxy.RDT
	Registerer prometheus.Registerer
	Refresh    <-chan struct{}
	// Synchronized is called once the store holds what containerd reported at (re)connection.
	Synchronized func(context.Context, *store.Snapshot)
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
