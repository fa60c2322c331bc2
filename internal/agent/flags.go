package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/tandemkit/tandem/config/slo"
	"github.com/tandemkit/tandem/config/slo/source"
	"github.com/tandemkit/tandem/hooks"
	"github.com/tandemkit/tandem/hooks/policy"
	"github.com/tandemkit/tandem/hooks/policy/podspec"
	"github.com/tandemkit/tandem/internal/flagfile"
	"github.com/tandemkit/tandem/internal/heaprelease"
	"github.com/tandemkit/tandem/metrics/collector"
	"github.com/tandemkit/tandem/proxy"
	alloc "github.com/tandemkit/tandem/resource/cpuset"
	"github.com/tandemkit/tandem/resource/topology"
)

// option binds one flag to its config-file key and TANDEM_* variable.
type option struct{ flag, key string }

// options are the flags of both binaries, each with its config-file key.
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

// flagValues is what the command line, the TANDEM_* variables and the config file say, each flag bound
// to its field; load derives the settings from it.
type flagValues struct {
	// proxy holds the CRI server's flags but --socket-mode, which is octal text until configFrom.
	proxy              proxy.Config
	socketMode         string
	maxHookAnswerBytes int
	metricsAddr        string
	debugSocket        string
	configFile         string
	hooksDir           string
	cgroupRoot         string
	policies           []string
	sysfsRoot          string
	reservedCPUs       string
	sloConfig          string
	sloConfigMap       string
	nodeLabels         map[string]string
	kubeletCgroupRoot  string
	kubeconfig         string
	nodeName           string
	podSpecWait        time.Duration
	kubeletConfig      string
	// kubeletConfigSet says --kubelet-config was given, by any source: the file is then read instead of
	// the running kubelet's.
	kubeletConfigSet bool
	cgroupDriver     string
	cpuManagerPolicy string
	runQueue         bool
	runQueueInterval time.Duration
	heapRelease      time.Duration
	nri              NRIOptions
}

// flags defines b's flags on fs, each bound to its field of v, with its default and help.
func (v *flagValues) flags(fs *pflag.FlagSet, b Binary) {
	def := proxy.DefaultConfig()
	fs.StringVar(&v.configFile, "config", "", "YAML or JSON config file; its keys are the camelCase forms of these flags (runtimeEndpoint, stateDir, ...)")
	fs.StringVar(&v.proxy.Listen, "listen", def.Listen, "unix socket that kubelet connects to (--container-runtime-endpoint=unix://<this>)")
	fs.StringVar(&v.proxy.RuntimeEndpoint, "runtime-endpoint", def.RuntimeEndpoint, "CRI endpoint of the container runtime")
	fs.StringVar(&v.proxy.ImageEndpoint, "image-endpoint", "", "CRI endpoint for the ImageService (default: --runtime-endpoint)")
	fs.StringVar(&v.proxy.StateDir, "state-dir", def.StateDir, "directory for the store checkpoint")
	fs.StringVar(&v.metricsAddr, "metrics-addr", "127.0.0.1:9316", "address for /metrics, /healthz and /readyz; empty disables")
	fs.StringVar(&v.debugSocket, "debug-socket", "", "unix socket, root's alone, serving /debug/store, /debug/pools and Go's profiles at /debug/pprof/ (default <state-dir>/debug.sock)")
	fs.StringVar(&v.socketMode, "socket-mode", fmt.Sprintf("%04o", def.SocketMode), "permission bits of the listen socket, octal")
	fs.StringVar(&v.proxy.SocketOwner, "socket-owner", "", "numeric uid:gid of the listen socket (default: the owner of the runtime socket)")
	fs.IntVar(&v.proxy.MaxMsgSize, "max-msg-size", def.MaxMsgSize, "largest gRPC message accepted or sent, in bytes (kubelet uses 16 MiB)")
	fs.IntVar(&v.proxy.MaxPodMetadataBytes, "max-pod-metadata-bytes", hooks.DefaultMaxMetadataBytes, "largest labels + annotations (keys and values) of a pod or container, as kubelet sends them and after each hook's answer; past it the call or the answer is refused")
	fs.IntVar(&v.maxHookAnswerBytes, "max-hook-answer-bytes", hooks.DefaultLimits().MaxAnswerBytes, "most bytes one hook's answer may add or change; past it the answer counts as that hook failing")
	fs.Int64Var(&v.proxy.MaxInflightBytes, "max-inflight-bytes", proxy.DefaultMaxInflightBytes, "bytes of lifecycle requests held at once (at least --max-msg-size); past it a call waits, within its deadline")
	fs.DurationVar(&v.proxy.ShutdownTimeout, "shutdown-timeout", def.ShutdownTimeout, "how long in-flight calls may finish after SIGTERM")
	fs.DurationVar(&v.proxy.ResyncPeriod, "resync-period", def.ResyncPeriod, "how often the store is reconciled with the runtime")
	fs.DurationVar(&v.proxy.RuntimeTimeout, "runtime-timeout", def.RuntimeTimeout, "timeout of the proxy's own calls to the runtime (recovery, resync)")
	fs.StringVar(&v.hooksDir, "hooks-dir", "/etc/tandem/hooks.d", "directory of remote hook server registrations (*.json; Koordinator's hookserver.d files are accepted too), reloaded on change")
	fs.StringVar(&v.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup mount, for the pod-level settings hooks ask for")
	fs.StringSliceVar(&v.policies, "policies", policy.Names(), "built-in policies to run, in their fixed order; empty runs none")
	fs.StringVar(&v.sysfsRoot, "sysfs-root", "/sys", "sysfs mount, for the CPU topology")
	fs.StringVar(&v.reservedCPUs, "reserved-cpus", "", "CPUs never handed to pods (a cpu list such as 0-1), as kubelet's --reserved-cpus")
	fs.StringVar(&v.sloConfig, "slo-config", "", "Koordinator slo-controller-config as a file (the ConfigMap YAML, or a file of its sections), for a standalone node; when set it is the source instead of --slo-configmap; reloaded on change")
	fs.StringVar(&v.sloConfigMap, "slo-configmap", source.DefaultConfigMap, "namespace/name of Koordinator's slo-controller-config ConfigMap, read and watched through the API server and matched against this Node's labels; empty disables")
	fs.StringToStringVar(&v.nodeLabels, "node-labels", map[string]string{}, "this node's labels, for the nodeStrategies selectors of --slo-config (k=v,...); with --slo-configmap the Node's own labels are used")
	fs.StringVar(&v.kubeletCgroupRoot, "kubelet-cgroup-root", "/", "kubelet's cgroupRoot: the BE pods' parent cgroup is <this>/kubepods/besteffort")
	hostname, _ := os.Hostname()
	fs.StringVar(&v.kubeconfig, "kubeconfig", "", "kubeconfig for the API server (kubelet's own, /etc/kubernetes/kubelet.conf on kubeadm); until it exists and the server answers the proxy serves CRI standalone; empty uses the in-cluster configuration, and without either the proxy runs standalone")
	// Kubelet registers the node under its lowercased hostname unless told otherwise.
	fs.StringVar(&v.nodeName, "node-name", strings.ToLower(hostname), "this node's name as kubelet registers it")
	fs.DurationVar(&v.podSpecWait, "pod-spec-wait", podspec.DefaultConfig().Wait, "how long a lookup waits for a pod the informer has not delivered yet, before one direct GET")
	fs.StringVar(&v.kubeletConfig, "kubelet-config", defaultKubeletConfig, "kubelet's configuration file, read at start for its cgroupDriver and cpuManagerPolicy unless --cgroup-driver and --cpu-manager-policy say them; when set, it is read instead of the running kubelet's files, and otherwise it is read only when not exactly one kubelet runs; a missing file means kubelet's defaults (cgroupfs, none)")
	fs.StringVar(&v.cgroupDriver, "cgroup-driver", "", "kubelet's cgroup driver, cgroupfs or systemd (default: the running kubelet's, from its --config, --config-dir and flags; else from --kubelet-config)")
	fs.StringVar(&v.cpuManagerPolicy, "cpu-manager-policy", "", "kubelet's CPU manager policy, none or static (default: the running kubelet's, from its --config, --config-dir and flags; else from --kubelet-config); under static, Guaranteed pods are LSR and keep the CPUs kubelet gave them")
	fs.BoolVar(&v.runQueue, "run-queue-latency", false, "measure each container's run-queue latency with eBPF (tandem_container_runqueue_*; needs tracefs and BPF, Linux 5.8+)")
	fs.DurationVar(&v.runQueueInterval, "run-queue-interval", collector.DefaultConfig().RunQueue.Interval, "how often --run-queue-latency drains its per-container histograms into the metrics (a shorter interval follows bursts closer and wakes the agent more often)")
	fs.DurationVar(&v.heapRelease, "heap-release-interval", heaprelease.DefaultInterval, "how often the agent checks whether it is quiet (allocated less than one heap goal since the last check) and then gives its free heap memory back to the kernel; 0 leaves it to Go's runtime")
	if b.NRI != nil {
		fs.StringVar(&v.nri.Socket, "nri-socket", defaultNRISocket, "containerd's NRI socket (containerd 1.7 or later, with NRI enabled)")
		fs.StringVar(&v.nri.Index, "nri-plugin-index", "40", "two digits: where Tandem runs among NRI plugins, lowest first")
		fs.DurationVar(&v.nri.RequestTimeout, "nri-request-timeout", 2*time.Second, "containerd's plugin_request_timeout: Tandem answers each event within it, so containerd never drops it")
		for _, f := range proxyOnly {
			_ = fs.MarkHidden(f)
		}
	}
}

// defaultNRISocket is where containerd serves NRI unless its config says otherwise.
const defaultNRISocket = "/var/run/nri/nri.sock"

// resolve fills v from args over the TANDEM_* variables over the config file (--config, else
// $TANDEM_CONFIG) over the flags' defaults.
func (v *flagValues) resolve(b Binary, args []string, getenv func(string) string) error {
	fs := pflag.NewFlagSet(b.Name, pflag.ContinueOnError)
	v.flags(fs, b)
	opts := options()
	if b.NRI != nil {
		opts = append(opts, nriOptions()...)
	}
	bindings := make([]flagfile.Binding, 0, len(opts))
	for _, o := range opts {
		bindings = append(bindings, flagfile.Binding{Flag: o.flag, Key: o.key, Env: flagfile.EnvName("TANDEM_", o.flag)})
	}
	// One config file serves tandem-proxy and tandem-nri: tandem-proxy accepts tandem-nri's keys.
	var ignored []string
	if b.NRI == nil {
		for _, o := range nriOptions() {
			ignored = append(ignored, o.key)
		}
	}
	cmd := flagfile.Command{Flags: fs, Bindings: bindings, ConfigFlag: "config", ConfigEnv: "TANDEM_CONFIG", Ignored: ignored}
	file, err := cmd.Load(args, getenv)
	if errors.Is(err, pflag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	v.configFile = file
	v.kubeletConfigSet = fs.Changed("kubelet-config")
	return nil
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
	var v flagValues
	if err := v.resolve(b, args, getenv); err != nil {
		return settings{}, err
	}
	cfg, err := configFrom(v)
	if err != nil {
		return settings{}, err
	}
	pol, cpus, limits, err := policySettings(v, cfg)
	if err != nil {
		return settings{}, err
	}
	st := settings{proxy: cfg, hookLimits: limits, metricsAddr: v.metricsAddr, debugSocket: v.debugSocket, configFile: v.configFile,
		hooksDir: v.hooksDir, cgroupRoot: v.cgroupRoot, policy: pol,
		sysfsRoot: v.sysfsRoot, cpus: cpus, sloConfig: v.sloConfig, nodeLabels: v.nodeLabels}
	if st.debugSocket == "" {
		// Beside the checkpoint, which holds the same pods: every proxy has a state dir of its own, which
		// the proxy creates 0700.
		st.debugSocket = filepath.Join(cfg.StateDir, debugSocketName)
	}
	st.podSpec = podspec.DefaultConfig()
	st.podSpec.Kubeconfig = v.kubeconfig
	st.podSpec.NodeName = v.nodeName
	st.podSpec.Wait = v.podSpecWait
	st.kubeletConfig = v.kubeletConfig
	st.kubelet, err = resolveKubelet(kubeletQuery{procRoot: procRoot, file: st.kubeletConfig, fileSet: v.kubeletConfigSet,
		cgroupDriver: v.cgroupDriver, cpuManagerPolicy: v.cpuManagerPolicy})
	if err != nil {
		return settings{}, fmt.Errorf("invalid configuration: %w", err)
	}
	st.runQueue = v.runQueue
	st.runQueueInterval = v.runQueueInterval
	st.heapRelease = v.heapRelease
	if st.heapRelease < 0 {
		return settings{}, fmt.Errorf("heap-release-interval %v: want 0 (off) or a positive duration such as 10s", st.heapRelease)
	}
	// Under kubelet's static CPU manager its Guaranteed pods hold exclusive CPUs: LSR, with kubelet's CPUs.
	st.policy.QoS.StaticCPUManager = st.kubelet.cpuManagerPolicy == cpuManagerStatic
	if err := st.podSpec.Validate(); err != nil {
		return settings{}, fmt.Errorf("invalid configuration: %w", err)
	}
	st.sloConfigMap = v.sloConfigMap
	st.kubeletCgroupRoot = path.Join("/", v.kubeletCgroupRoot)
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
		st.nri = v.nri
	}
	return st, nil
}

// policySettings are the built-in policies' settings, the CPUs kept from pods and the hooks' limits.
func policySettings(v flagValues, cfg proxy.Config) (policy.Config, alloc.Config, hooks.Limits, error) {
	pol := policy.DefaultConfig()
	pol.Enabled = v.policies
	if err := pol.Validate(); err != nil {
		return pol, alloc.Config{}, hooks.Limits{}, fmt.Errorf("invalid configuration: %w", err)
	}
	cpus := alloc.DefaultConfig()
	if r := v.reservedCPUs; r != "" {
		set, err := topology.ParseCPUList(r)
		if err != nil {
			return pol, cpus, hooks.Limits{}, fmt.Errorf("invalid configuration: reserved-cpus %q: %w", r, err)
		}
		cpus.Reserved = set
	}
	// The hooks' metadata bound is the proxy's: a hook may not take a pod past what kubelet may send.
	limits := hooks.Limits{MaxAnswerBytes: v.maxHookAnswerBytes, MaxMetadataBytes: cfg.MaxPodMetadataBytes}
	if limits.MaxMetadataBytes == 0 {
		limits.MaxMetadataBytes = hooks.DefaultMaxMetadataBytes
	}
	if err := limits.Validate(); err != nil {
		return pol, cpus, limits, fmt.Errorf("invalid configuration: %w", err)
	}
	return pol, cpus, limits, nil
}

// configFrom is the CRI server's configuration: the flags' values, --socket-mode parsed, validated.
func configFrom(v flagValues) (proxy.Config, error) {
	mode, err := strconv.ParseUint(v.socketMode, 8, 32)
	if err != nil {
		return proxy.Config{}, fmt.Errorf("socket-mode %q: want octal permission bits such as 0660: %w", v.socketMode, err)
	}
	cfg := v.proxy
	cfg.SocketMode = uint32(mode)
	if err := cfg.Validate(); err != nil {
		return proxy.Config{}, fmt.Errorf("invalid configuration: %w", err)
	}
	return cfg, nil
}
