package agent

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestKubeletSettings: kubelet's cgroup driver and CPU manager policy come from the flags, else from
// kubelet's configuration file, else kubelet's defaults; the static policy makes Guaranteed pods LSR.
func TestKubeletSettings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	static := write("static.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n")
	plain := write("plain.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	broken := write("broken.yaml", "cpuManagerPolicy: [static\n")
	odd := write("odd.yaml", "cpuManagerPolicy: dynamic\n")
	tests := []struct {
		name                 string
		args                 []string
		wantDriver, wantCPUs string
		wantLSR              bool
		wantErr              string
	}{
		{name: "no kubelet config: kubelet's defaults", args: []string{"--kubelet-config", filepath.Join(dir, "absent.yaml")}, wantDriver: "cgroupfs", wantCPUs: "none"},
		{name: "from kubelet's file", args: []string{"--kubelet-config", static}, wantDriver: "systemd", wantCPUs: "static", wantLSR: true},
		{name: "file without the keys", args: []string{"--kubelet-config", plain}, wantDriver: "cgroupfs", wantCPUs: "none"},
		{name: "flags beat the file", args: []string{"--kubelet-config", static, "--cpu-manager-policy", "none", "--cgroup-driver", "cgroupfs"}, wantDriver: "cgroupfs", wantCPUs: "none"},
		{name: "flags without a file", args: []string{"--kubelet-config", "", "--cpu-manager-policy", "static"}, wantDriver: "cgroupfs", wantCPUs: "static", wantLSR: true},
		{name: "flags make the file unneeded", args: []string{"--kubelet-config", broken, "--cpu-manager-policy", "static", "--cgroup-driver", "systemd"}, wantDriver: "systemd", wantCPUs: "static", wantLSR: true},
		{name: "a file that does not parse is an error", args: []string{"--kubelet-config", broken}, wantErr: "broken.yaml"},
		{name: "a file that cannot be read is an error", args: []string{"--kubelet-config", dir}, wantErr: "is a directory"},
		{name: "an unknown policy is an error", args: []string{"--kubelet-config", odd}, wantErr: `"dynamic"`},
		{name: "an unknown driver is an error", args: []string{"--kubelet-config", "", "--cgroup-driver", "sysd"}, wantErr: `"sysd"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := load(proxyBinary, tt.args, func(string) string { return "" }, t.TempDir())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("load = %v, want an error naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st.kubelet.cgroupDriver != tt.wantDriver || st.kubelet.cpuManagerPolicy != tt.wantCPUs || st.policy.QoS.StaticCPUManager != tt.wantLSR {
				t.Fatalf("driver, policy, Guaranteed LSR = %s, %s, %v; want %s, %s, %v",
					st.kubelet.cgroupDriver, st.kubelet.cpuManagerPolicy, st.policy.QoS.StaticCPUManager, tt.wantDriver, tt.wantCPUs, tt.wantLSR)
			}
		})
	}
}

// TestRunQueueSwitch: the eBPF run-queue collector is off unless the flag or the config file's key turns
// it on.
func TestRunQueueSwitch(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tandem.yaml")
	if err := os.WriteFile(file, []byte("runQueueLatency: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want bool
	}{
		{name: "off by default", want: false},
		{name: "flag", args: []string{"--run-queue-latency"}, want: true},
		{name: "config file key", args: []string{"--config", file}, want: true},
		{name: "flag beats the file", args: []string{"--config", file, "--run-queue-latency=false"}, want: false},
		{name: "environment", env: map[string]string{"TANDEM_RUN_QUEUE_LATENCY": "true"}, want: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := load(proxyBinary, tt.args, func(k string) string { return tt.env[k] }, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if got := collectorConfig(st).RunQueue.Enabled; got != tt.want {
				t.Fatalf("run-queue collector enabled = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestBEParentFollowsTheCgroupDriver: suppression and BE thread scheduling find the BE pods' parent where
// kubelet's cgroup driver puts it.
func TestBEParentFollowsTheCgroupDriver(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args             []string
		want, wantCgRoot string
	}{
		{[]string{"--kubelet-config", ""}, "/kubepods/besteffort", "/"},
		{[]string{"--kubelet-config", "", "--kubelet-cgroup-root", "/k8s"}, "/k8s/kubepods/besteffort", "/k8s"},
		{[]string{"--kubelet-config", "", "--kubelet-cgroup-root", "k8s/"}, "/k8s/kubepods/besteffort", "/k8s"},
		// Host applications' Kubepods bases under systemd need kubelet's cgroup root to stay "/".
		{[]string{"--kubelet-config", "", "--cgroup-driver", "systemd"}, "kubepods-besteffort.slice", "/"},
	} {
		st, err := load(proxyBinary, tt.args, func(string) string { return "" }, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if st.beParent != tt.want || st.kubeletCgroupRoot != tt.wantCgRoot {
			t.Errorf("%v: BE parent %q, kubelet cgroup root %q; want %q, %q", tt.args, st.beParent, st.kubeletCgroupRoot, tt.want, tt.wantCgRoot)
		}
	}
}

// fakeProcess is one process of a procfs built by fakeProc.
type fakeProcess struct {
	pid  int
	comm string
	// args is the command line; nil makes an empty cmdline file, as a zombie's.
	args []string
	// cwd is what the cwd link reads, as procfs shows it: a path in the process's root.
	cwd string
	// files are the process's root file system: path → content, or → "@target" for a symbolic link.
	files map[string]string
	// rootLink makes root/ a symbolic link to the file system, as procfs shows it, instead of a directory.
	rootLink bool
}

// fakeProc builds a procfs with procs under a new temporary directory and returns it.
func fakeProc(t *testing.T, procs ...fakeProcess) string {
	t.Helper()
	dir := t.TempDir()
	procRoot := filepath.Join(dir, "proc")
	for _, p := range procs {
		pidDir := filepath.Join(procRoot, strconv.Itoa(p.pid))
		root := filepath.Join(pidDir, "root")
		if p.rootLink {
			root = filepath.Join(dir, "fs", strconv.Itoa(p.pid))
			mkdir(t, filepath.Dir(root))
			mkdir(t, pidDir)
			if err := os.Symlink(root, filepath.Join(pidDir, "root")); err != nil {
				t.Fatal(err)
			}
		}
		mkdir(t, root)
		cmdline := ""
		if p.args != nil {
			cmdline = strings.Join(p.args, "\x00") + "\x00"
		}
		writeFile(t, filepath.Join(pidDir, "comm"), p.comm+"\n")
		writeFile(t, filepath.Join(pidDir, "cmdline"), cmdline)
		if p.cwd != "" {
			if err := os.Symlink(p.cwd, filepath.Join(pidDir, "cwd")); err != nil {
				t.Fatal(err)
			}
		}
		for name, content := range p.files {
			host := filepath.Join(root, name)
			mkdir(t, filepath.Dir(host))
			if target, ok := strings.CutPrefix(content, "@"); ok {
				if err := os.Symlink(target, host); err != nil {
					t.Fatal(err)
				}
				continue
			}
			writeFile(t, host, content)
		}
	}
	// Not a process: procfs holds other files too.
	writeFile(t, filepath.Join(procRoot, "meminfo"), "MemTotal: 1 kB\n")
	return procRoot
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	mkdir(t, filepath.Dir(name))
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubeletYAML is a KubeletConfiguration (or a drop-in) setting the keys given, "" leaving one out.
func kubeletYAML(driver, policy string) string {
	s := "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	if driver != "" {
		s += "cgroupDriver: " + driver + "\n"
	}
	if policy != "" {
		s += "cpuManagerPolicy: " + policy + "\n"
	}
	return s
}

// TestResolveKubelet: kubelet's settings come from the agent's flags, else from --kubelet-config when
// it is set, else from the one running kubelet's --config, drop-ins and flags merged as kubelet merges
// them, else from --kubelet-config; each with its source, and an unreadable file of the found kubelet
// is an error naming it.
func TestResolveKubelet(t *testing.T) {
	t.Parallel()
	const kubeletConfig = "/var/lib/kubelet/config.yaml"
	kubelet := func(args []string, files map[string]string) fakeProcess {
		return fakeProcess{pid: 812, comm: "kubelet", args: append([]string{"/usr/bin/kubelet"}, args...), cwd: "/", files: files}
	}
	containerd := fakeProcess{pid: 640, comm: "containerd", args: []string{"/usr/bin/containerd"}, cwd: "/"}
	// The agent's own --kubelet-config, which says otherwise than the kubelets below.
	agentFile := filepath.Join(t.TempDir(), "agent-view.yaml")
	writeFile(t, agentFile, kubeletYAML("cgroupfs", "none"))
	// A drop-in directory as kubeadm and `tandemctl node install` lay it out.
	dropIns := map[string]string{
		kubeletConfig: kubeletYAML("cgroupfs", "none"),
		"/etc/kubernetes/kubelet.conf.d/05-first.conf":         kubeletYAML("", "static"),
		"/etc/kubernetes/kubelet.conf.d/10-driver.conf":        kubeletYAML("systemd", ""),
		"/etc/kubernetes/kubelet.conf.d/20-cpu.conf":           kubeletYAML("", "static"),
		"/etc/kubernetes/kubelet.conf.d/50-tandem.conf":        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///var/run/tandem/tandem.sock\n",
		"/etc/kubernetes/kubelet.conf.d/60-empty.conf":         "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: \"\"\n",
		"/etc/kubernetes/kubelet.conf.d/99-not-a-drop-in.yaml": kubeletYAML("cgroupfs", "none"),
	}
	withDropIns := []string{"--config=" + kubeletConfig, "--config-dir=/etc/kubernetes/kubelet.conf.d"}
	type want struct {
		driver, driverFrom, policy, policyFrom string
		lookup                                 []string
	}
	tests := []struct {
		name  string
		procs []fakeProcess
		// noProc leaves the proc root absent.
		noProc bool
		query  kubeletQuery
		want   want
		// wantErr are strings the error must hold.
		wantErr []string
	}{
		{
			name:  "no kubelet: --kubelet-config, read at start",
			procs: []fakeProcess{containerd},
			query: kubeletQuery{file: agentFile},
			want: want{"cgroupfs", "--kubelet-config " + agentFile, "none", "--kubelet-config " + agentFile,
				[]string{"no kubelet running", "read at start", "until the agent restarts"}},
		},
		{
			name:  "no kubelet and no file: kubelet's defaults",
			procs: []fakeProcess{containerd},
			query: kubeletQuery{file: "/nonexistent/config.yaml"},
			want:  want{"cgroupfs", "kubelet's default", "none", "kubelet's default", []string{"no kubelet running", "/nonexistent/config.yaml absent"}},
		},
		{
			name:   "no process list: --kubelet-config",
			noProc: true,
			query:  kubeletQuery{file: agentFile},
			want:   want{"cgroupfs", "--kubelet-config " + agentFile, "none", "--kubelet-config " + agentFile, []string{"no process list"}},
		},
		{
			name:  "kubelet's --config=file",
			procs: []fakeProcess{containerd, kubelet([]string{"--config=" + kubeletConfig}, map[string]string{kubeletConfig: kubeletYAML("systemd", "static")})},
			query: kubeletQuery{file: agentFile},
			want: want{"systemd", "kubelet pid 812's --config " + kubeletConfig, "static", "kubelet pid 812's --config " + kubeletConfig,
				[]string{"kubelet pid 812", "read at start"}},
		},
		{
			name:  "kubelet's --config file, and root/ a link",
			procs: []fakeProcess{{pid: 812, comm: "kubelet", args: []string{"kubelet", "--config", "/etc/k/kubelet.yaml"}, cwd: "/", rootLink: true, files: map[string]string{"/etc/k/kubelet.yaml": kubeletYAML("systemd", "")}}},
			want:  want{"systemd", "kubelet pid 812's --config /etc/k/kubelet.yaml", "none", "kubelet's default", []string{"kubelet pid 812"}},
		},
		{
			name:  "drop-ins over the file, in lexical order; empty keys and other files change nothing",
			procs: []fakeProcess{kubelet(withDropIns, dropIns)},
			want: want{"systemd", "kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/10-driver.conf",
				"static", "kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/20-cpu.conf", nil},
		},
		{
			name: "lexical order, not numeric: 9 comes after 10",
			procs: []fakeProcess{kubelet([]string{"--config-dir", "/etc/kubernetes/kubelet.conf.d/"}, map[string]string{
				"/etc/kubernetes/kubelet.conf.d/9-later.conf":    kubeletYAML("", "static"),
				"/etc/kubernetes/kubelet.conf.d/10-earlier.conf": kubeletYAML("", "none"),
			})},
			want: want{"cgroupfs", "kubelet's default", "static", "kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/9-later.conf", nil},
		},
		{
			name: "subdirectories are walked, as kubelet's WalkDir walks them",
			procs: []fakeProcess{kubelet([]string{"--config-dir=/etc/kubernetes/kubelet.conf.d"}, map[string]string{
				"/etc/kubernetes/kubelet.conf.d/a.conf":   kubeletYAML("", "none"),
				"/etc/kubernetes/kubelet.conf.d/b/x.conf": kubeletYAML("", "static"),
			})},
			want: want{"cgroupfs", "kubelet's default", "static", "kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/b/x.conf", nil},
		},
		{
			name:  "kubelet's flags beat its files",
			procs: []fakeProcess{kubelet(append([]string{"--cgroup-driver=cgroupfs", "--fail-swap-on=false"}, withDropIns...), dropIns)},
			want: want{"cgroupfs", "kubelet pid 812's command line",
				"static", "kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/20-cpu.conf", nil},
		},
		{
			name:  "deprecated flags alone, --flag value and --flag_name=value",
			procs: []fakeProcess{kubelet([]string{"--cgroup-driver", "systemd", "--cpu_manager_policy=static", "--v=2"}, nil)},
			want:  want{"systemd", "kubelet pid 812's command line", "static", "kubelet pid 812's command line", nil},
		},
		{
			name:  "a kubelet without --config: kubelet's defaults",
			procs: []fakeProcess{kubelet([]string{"--kubeconfig=/etc/kubernetes/kubelet.conf"}, nil)},
			query: kubeletQuery{file: agentFile},
			want:  want{"cgroupfs", "kubelet's default", "none", "kubelet's default", []string{"kubelet pid 812"}},
		},
		{
			name:  "the agent's flag beats kubelet",
			procs: []fakeProcess{kubelet([]string{"--config=" + kubeletConfig}, map[string]string{kubeletConfig: kubeletYAML("systemd", "static")})},
			query: kubeletQuery{cpuManagerPolicy: "none"},
			want:  want{"systemd", "kubelet pid 812's --config " + kubeletConfig, "none", "flag --cpu-manager-policy", nil},
		},
		{
			name:  "the agent's two flags: kubelet is not read",
			procs: []fakeProcess{kubelet([]string{"--config=/absent.yaml"}, nil)},
			query: kubeletQuery{cgroupDriver: "systemd", cpuManagerPolicy: "static"},
			want:  want{"systemd", "flag --cgroup-driver", "static", "flag --cpu-manager-policy", []string{"none: --cgroup-driver and --cpu-manager-policy set"}},
		},
		{
			name:  "--kubelet-config set: kubelet is not read",
			procs: []fakeProcess{kubelet([]string{"--config=" + kubeletConfig}, map[string]string{kubeletConfig: kubeletYAML("systemd", "static")})},
			query: kubeletQuery{file: agentFile, fileSet: true},
			want:  want{"cgroupfs", "--kubelet-config " + agentFile, "none", "--kubelet-config " + agentFile, []string{"none: --kubelet-config set"}},
		},
		{
			name: "several kubelets: no guess, --kubelet-config",
			procs: []fakeProcess{
				kubelet([]string{"--config=" + kubeletConfig}, map[string]string{kubeletConfig: kubeletYAML("systemd", "static")}),
				{pid: 913, comm: "kubelet", args: []string{"kubelet", "--cgroup-driver=systemd"}, cwd: "/"},
			},
			query: kubeletQuery{file: agentFile},
			want: want{"cgroupfs", "--kubelet-config " + agentFile, "none", "--kubelet-config " + agentFile,
				[]string{"2 kubelets running (pids 812, 913)", "set --kubelet-config, or --cgroup-driver and --cpu-manager-policy"}},
		},
		{
			name: "a zombie kubelet is not a second one",
			procs: []fakeProcess{
				kubelet([]string{"--config=" + kubeletConfig}, map[string]string{kubeletConfig: kubeletYAML("systemd", "static")}),
				{pid: 700, comm: "kubelet"},
			},
			want: want{"systemd", "kubelet pid 812's --config " + kubeletConfig, "static", "kubelet pid 812's --config " + kubeletConfig, nil},
		},
		{
			name: "relative paths are from kubelet's working directory",
			procs: []fakeProcess{{pid: 812, comm: "kubelet", args: []string{"kubelet", "--config", "config.yaml", "--config-dir=../../../etc/kubernetes/kubelet.conf.d"}, cwd: "/var/lib/kubelet",
				files: map[string]string{kubeletConfig: kubeletYAML("systemd", ""), "/etc/kubernetes/kubelet.conf.d/20-cpu.conf": kubeletYAML("", "static")}}},
			want: want{"systemd", "kubelet pid 812's --config /var/lib/kubelet/config.yaml", "static", "kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/20-cpu.conf", nil},
		},
		{
			name: "an absolute link is followed in kubelet's root",
			procs: []fakeProcess{kubelet([]string{"--config=/etc/kubernetes/kubelet.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d/"}, map[string]string{
				"/etc/kubernetes":          "@/opt/k8s",
				"/opt/k8s/kubelet.yaml":    "@../../etc/static/kubelet.yaml",
				"/etc/static/kubelet.yaml": kubeletYAML("systemd", ""),
				"/opt/k8s/kubelet.conf.d":  "@/opt/dropins",
				"/opt/dropins/10-cpu.conf": "@/opt/files/cpu.yaml",
				"/opt/files/cpu.yaml":      kubeletYAML("", "static"),
			})},
			want: want{"systemd", "kubelet pid 812's --config /etc/kubernetes/kubelet.yaml", "static", "kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/10-cpu.conf", nil},
		},
		{
			name: "a linked --config-dir without a final / is not walked, as by kubelet",
			procs: []fakeProcess{kubelet([]string{"--config-dir=/etc/kubernetes/kubelet.conf.d"}, map[string]string{
				"/etc/kubernetes/kubelet.conf.d": "@/opt/dropins",
				"/opt/dropins/10-cpu.conf":       kubeletYAML("", "static"),
			})},
			want: want{"cgroupfs", "kubelet's default", "none", "kubelet's default", nil},
		},
		{
			name:    "kubelet's --config missing: an error naming it and the fix",
			procs:   []fakeProcess{kubelet([]string{"--config=" + kubeletConfig}, nil)},
			query:   kubeletQuery{file: agentFile},
			wantErr: []string{"kubelet pid 812's --config " + kubeletConfig, "set --cgroup-driver and --cpu-manager-policy", "no such file"},
		},
		{
			name:    "kubelet's --config unreadable",
			procs:   []fakeProcess{kubelet([]string{"--config=/etc/kubernetes"}, map[string]string{"/etc/kubernetes/x": ""})},
			wantErr: []string{"kubelet pid 812's --config /etc/kubernetes", "is a directory"},
		},
		{
			name: "a drop-in that does not parse",
			procs: []fakeProcess{kubelet(withDropIns, map[string]string{
				kubeletConfig: kubeletYAML("systemd", ""),
				"/etc/kubernetes/kubelet.conf.d/30-broken.conf": "cpuManagerPolicy: [static\n",
			})},
			wantErr: []string{"kubelet pid 812's drop-in /etc/kubernetes/kubelet.conf.d/30-broken.conf", "not a KubeletConfiguration"},
		},
		{
			name:    "kubelet's --config-dir missing",
			procs:   []fakeProcess{kubelet([]string{"--config-dir=/etc/kubernetes/kubelet.conf.d"}, nil)},
			wantErr: []string{"kubelet pid 812's --config-dir /etc/kubernetes/kubelet.conf.d", "set --cgroup-driver"},
		},
		{
			name:    "a kubelet value the agent does not know names its source",
			procs:   []fakeProcess{kubelet([]string{"--cpu-manager-policy=dynamic"}, nil)},
			wantErr: []string{`"dynamic"`, "kubelet pid 812's command line"},
		},
		{
			name:    "a relative path without a working directory",
			procs:   []fakeProcess{{pid: 812, comm: "kubelet", args: []string{"kubelet", "--config=config.yaml"}}},
			wantErr: []string{"kubelet pid 812's --config config.yaml is relative"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := tt.query
			q.procRoot = fakeProc(t, tt.procs...)
			if tt.noProc {
				q.procRoot = filepath.Join(t.TempDir(), "absent")
			}
			got, err := resolveKubelet(q)
			if tt.wantErr != nil {
				for _, w := range tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("resolveKubelet = %+v, %v; want an error with %q", got, err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.cgroupDriver != tt.want.driver || got.cgroupDriverFrom != tt.want.driverFrom ||
				got.cpuManagerPolicy != tt.want.policy || got.cpuManagerPolicyFrom != tt.want.policyFrom {
				t.Errorf("driver %s from %q, policy %s from %q;\nwant %s from %q, %s from %q", got.cgroupDriver, got.cgroupDriverFrom,
					got.cpuManagerPolicy, got.cpuManagerPolicyFrom, tt.want.driver, tt.want.driverFrom, tt.want.policy, tt.want.policyFrom)
			}
			for _, w := range tt.want.lookup {
				if !strings.Contains(got.lookup, w) {
					t.Errorf("lookup %q, want it to say %q", got.lookup, w)
				}
			}
		})
	}
}

// TestKubeletFlags: kubelet's command line is read as kubelet's pflag set reads it.
func TestKubeletFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want map[string]string
	}{
		{"both forms", []string{"kubelet", "--config", "/a.yaml", "--config-dir=/d"}, map[string]string{"config": "/a.yaml", "config-dir": "/d"}},
		{"underscores", []string{"kubelet", "--cgroup_driver=systemd", "--cpu_manager_policy", "static"}, map[string]string{"cgroup-driver": "systemd", "cpu-manager-policy": "static"}},
		{"the last one wins", []string{"kubelet", "--cgroup-driver=cgroupfs", "--cgroup-driver", "systemd"}, map[string]string{"cgroup-driver": "systemd"}},
		{"other flags and their values are skipped", []string{"kubelet", "--node-ip", "10.0.0.1", "-v=2", "--config=/a.yaml"}, map[string]string{"config": "/a.yaml"}},
		{"a value may be empty", []string{"kubelet", "--config="}, map[string]string{"config": ""}},
		{"no value at the end", []string{"kubelet", "--config"}, map[string]string{}},
		{"nothing after --", []string{"kubelet", "--", "--config=/a.yaml"}, map[string]string{}},
		{"the program is not a flag", []string{"--config=/a.yaml"}, map[string]string{}},
	} {
		if got := kubeletFlags(tt.args); !maps.Equal(got, tt.want) {
			t.Errorf("%s: kubeletFlags(%q) = %v, want %v", tt.name, tt.args, got, tt.want)
		}
	}
}

// TestLoadFollowsKubelet: load looks for the running kubelet unless --kubelet-config is given, by flag,
// variable or config key, and the BE parent and Guaranteed pods follow what it found.
func TestLoadFollowsKubelet(t *testing.T) {
	t.Parallel()
	procRoot := fakeProc(t, fakeProcess{pid: 812, comm: "kubelet", args: []string{"/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml"}, cwd: "/",
		files: map[string]string{"/var/lib/kubelet/config.yaml": kubeletYAML("systemd", "static")}})
	dir := t.TempDir()
	own := filepath.Join(dir, "kubelet.yaml")
	writeFile(t, own, kubeletYAML("cgroupfs", "none"))
	conf := filepath.Join(dir, "tandem.yaml")
	writeFile(t, conf, "kubeletConfig: "+own+"\n")
	for _, tt := range []struct {
		name                 string
		args                 []string
		env                  map[string]string
		wantDriver, wantFrom string
		wantBEParent         string
		wantLSR              bool
	}{
		{name: "the running kubelet", wantDriver: "systemd", wantFrom: "kubelet pid 812's --config /var/lib/kubelet/config.yaml", wantBEParent: "kubepods-besteffort.slice", wantLSR: true},
		{name: "--kubelet-config", args: []string{"--kubelet-config", own}, wantDriver: "cgroupfs", wantFrom: "--kubelet-config " + own, wantBEParent: "/kubepods/besteffort"},
		{name: "TANDEM_KUBELET_CONFIG", env: map[string]string{"TANDEM_KUBELET_CONFIG": own}, wantDriver: "cgroupfs", wantFrom: "--kubelet-config " + own, wantBEParent: "/kubepods/besteffort"},
		{name: "config key kubeletConfig", args: []string{"--config", conf}, wantDriver: "cgroupfs", wantFrom: "--kubelet-config " + own, wantBEParent: "/kubepods/besteffort"},
		{name: "--cgroup-driver", args: []string{"--cgroup-driver=cgroupfs"}, wantDriver: "cgroupfs", wantFrom: "flag --cgroup-driver", wantBEParent: "/kubepods/besteffort", wantLSR: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st, err := load(proxyBinary, tt.args, func(k string) string { return tt.env[k] }, procRoot)
			if err != nil {
				t.Fatal(err)
			}
			if st.kubelet.cgroupDriver != tt.wantDriver || st.kubelet.cgroupDriverFrom != tt.wantFrom || st.beParent != tt.wantBEParent || st.policy.QoS.StaticCPUManager != tt.wantLSR {
				t.Errorf("driver %s from %q, BE parent %s, Guaranteed LSR %v; want %s from %q, %s, %v", st.kubelet.cgroupDriver, st.kubelet.cgroupDriverFrom,
					st.beParent, st.policy.QoS.StaticCPUManager, tt.wantDriver, tt.wantFrom, tt.wantBEParent, tt.wantLSR)
			}
		})
	}
}

// FuzzKubeletFlags: any command line parses, and only the flags the agent follows come out.
func FuzzKubeletFlags(f *testing.F) {
	f.Add("/usr/bin/kubelet\x00--config=/var/lib/kubelet/config.yaml\x00--config-dir\x00/etc/kubernetes/kubelet.conf.d")
	f.Add("kubelet\x00--cgroup_driver\x00systemd\x00--\x00--cpu-manager-policy=static")
	f.Add("kubelet\x00--config")
	f.Fuzz(func(t *testing.T, cmdline string) {
		for name := range kubeletFlags(strings.Split(cmdline, "\x00")) {
			if !slices.Contains([]string{"config", "config-dir", "cgroup-driver", "cpu-manager-policy"}, name) {
				t.Fatalf("kubeletFlags(%q) returned --%s", cmdline, name)
			}
		}
	})
}

// FuzzInRoot: whatever the path and the links on it, inRoot ends, and its answer is inside the root.
func FuzzInRoot(f *testing.F) {
	f.Add("/etc/kubernetes/kubelet.yaml", "/opt/k8s")
	f.Add("/etc/kubernetes/../../../../x", "../../..")
	f.Add("/etc/kubernetes/x", "/etc/kubernetes")
	f.Fuzz(func(t *testing.T, p, target string) {
		root := t.TempDir()
		mkdir(t, filepath.Join(root, "etc"))
		if err := os.Symlink(target, filepath.Join(root, "etc", "kubernetes")); err != nil {
			t.Skip(err)
		}
		got, err := inRoot(root, p, true)
		if err != nil {
			return
		}
		if got != root && !strings.HasPrefix(got, root+string(filepath.Separator)) {
			t.Fatalf("inRoot(%s, %q) with etc/kubernetes -> %q = %s, outside the root", root, p, target, got)
		}
	})
}
