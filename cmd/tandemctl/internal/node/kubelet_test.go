package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The files of a kubeadm node whose kubelet comes from the pkgs.k8s.io packages.
const (
	kubeletUnit = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`
	// kubeadmDropIn takes the environment file kubeadm's users edit (%s).
	kubeadmDropIn = `# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-%s
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`
	kubeadmFlags = `KUBELET_KUBEADM_ARGS="--pod-infra-container-image=registry.k8s.io/pause:3.10"` + "\n"
	// kubeadmFlagsOld is what kubeadm before 1.27 wrote: the runtime endpoint as a flag.
	kubeadmFlagsOld   = `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9"` + "\n"
	containerd        = "unix:///run/containerd/containerd.sock"
	debDropInPath     = "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"
	kubeletUnitPath   = "usr/lib/systemd/system/kubelet.service"
	defaultDropInPath = "etc/kubernetes/kubelet.conf.d/50-tandem-runtime.conf"
)

// debian is a Debian/Ubuntu node's tree below the prefix; rpm a RHEL node's (which has
// /etc/default too).
func debian() map[string]string {
	return map[string]string{
		kubeletUnitPath:                         kubeletUnit,
		debDropInPath:                           fmt.Sprintf(kubeadmDropIn, debianEnvFile),
		"var/lib/kubelet/kubeadm-flags.env":     kubeadmFlags,
		"etc/default/grub":                      "GRUB_TIMEOUT=5\n",
		"var/lib/kubelet/config.yaml":           "kind: KubeletConfiguration\n",
		"etc/kubernetes/kubelet.conf":           "apiVersion: v1\n",
		"etc/kubernetes/bootstrap-kubelet.conf": "apiVersion: v1\n",
	}
}

func rpm() map[string]string {
	tree := debian()
	tree[debDropInPath] = fmt.Sprintf(kubeadmDropIn, rpmEnvFile)
	tree["etc/sysconfig/kubelet"] = "KUBELET_EXTRA_ARGS=\n"
	return tree
}

// with returns tree with files set (an empty content removes the file).
func with(tree map[string]string, files ...string) map[string]string {
	for i := 0; i+1 < len(files); i += 2 {
		if files[i+1] == "" {
			delete(tree, files[i])
		} else {
			tree[files[i]] = files[i+1]
		}
	}
	return tree
}

func writeTree(t *testing.T, root string, tree map[string]string) {
	t.Helper()
	for p, data := range tree {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree returns every file below root, by its path there.
func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// addKubelet adds a process to a fake /proc; comm is its name.
func addKubelet(t *testing.T, proc, pid, comm string, args ...string) {
	t.Helper()
	dir := filepath.Join(proc, pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(strings.Join(args, "\x00")+"\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// kubeadmKubelet is the command line the packages' unit gives kubelet, and more.
func kubeadmKubelet(more ...string) []string {
	return append([]string{"/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml", "--pod-infra-container-image=registry.k8s.io/pause:3.10"}, more...)
}

func TestInstallRefusesFlagBypassingProxy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		tree map[string]string
		// kubelet is the running kubelet's command line; nil for none.
		kubelet []string
		want    []string
	}{
		{name: "kubeadm-flags.env from kubeadm < 1.27",
			tree: with(debian(), "var/lib/kubelet/kubeadm-flags.env", kubeadmFlagsOld),
			want: []string{"var/lib/kubelet/kubeadm-flags.env line 1: KUBELET_KUBEADM_ARGS has --container-runtime-endpoint=unix:///var/run/containerd/containerd.sock: delete it from that line",
				"kubeadm join and kubeadm upgrade", "containerRuntimeEndpoint in kubelet's configuration"}},
		{name: "/etc/default/kubelet, flag and value apart",
			tree: with(debian(), "etc/default/kubelet", "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.2 --image-service-endpoint "+containerd+"\n"),
			want: []string{"etc/default/kubelet line 1: KUBELET_EXTRA_ARGS has --image-service-endpoint " + containerd + ": delete it from that line"}},
		{name: "/etc/sysconfig/kubelet, quoted",
			tree: with(rpm(), "etc/sysconfig/kubelet", "# extra\nKUBELET_EXTRA_ARGS=\"--v=2 --container-runtime-endpoint="+containerd+"\"\n"),
			want: []string{"etc/sysconfig/kubelet line 2: KUBELET_EXTRA_ARGS has --container-runtime-endpoint=" + containerd}},
		{name: "Environment= of a drop-in",
			tree: with(debian(), "etc/systemd/system/kubelet.service.d/20-runtime.conf",
				"[Service]\nEnvironment=\"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml --container-runtime-endpoint="+containerd+"\"\n"),
			want: []string{"etc/systemd/system/kubelet.service.d/20-runtime.conf line 2: Environment= sets KUBELET_CONFIG_ARGS with --container-runtime-endpoint=" + containerd +
				": delete it from that line, then run systemctl daemon-reload"}},
		{name: "ExecStart= of a drop-in",
			tree: with(debian(), "etc/systemd/system/kubelet.service.d/30-exec.conf",
				"[Service]\nExecStart=\nExecStart=/usr/bin/kubelet $KUBELET_CONFIG_ARGS \\\n  --container-runtime-endpoint "+containerd+" $KUBELET_EXTRA_ARGS\n"),
			want: []string{"etc/systemd/system/kubelet.service.d/30-exec.conf line 3: ExecStart= has --container-runtime-endpoint " + containerd +
				": delete it from that line, then run systemctl daemon-reload"}},
		{name: "the running kubelet only",
			tree:    debian(),
			kubelet: kubeadmKubelet("--container-runtime-endpoint=" + containerd),
			want: []string{"kubelet (pid 4242) runs with --container-runtime-endpoint=" + containerd + ", which no file tandemctl read gives it",
				"systemctl cat kubelet", "systemctl restart kubelet"}},
		{name: "a file and the running kubelet",
			tree:    with(debian(), "var/lib/kubelet/kubeadm-flags.env", kubeadmFlagsOld),
			kubelet: kubeadmKubelet("--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock"),
			want: []string{"kubeadm-flags.env line 1",
				"kubelet (pid 4242) runs with --container-runtime-endpoint=unix:///var/run/containerd/containerd.sock: once the lines above are fixed, restart it (systemctl restart kubelet)"}},
		{name: "no kubelet.service found: kubeadm's files still read",
			tree: map[string]string{"var/lib/kubelet/kubeadm-flags.env": kubeadmFlagsOld},
			want: []string{"kubeadm-flags.env line 1: KUBELET_KUBEADM_ARGS has --container-runtime-endpoint"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(t)
			writeTree(t, o.Prefix, tc.tree)
			if tc.kubelet != nil {
				addKubelet(t, o.ProcRoot, "4242", "kubelet", tc.kubelet...)
			}
			res, err := Install(o)
			if !errors.Is(err, ErrKubeletFlagBypass) {
				t.Fatalf("Install = %+v, %v; want ErrKubeletFlagBypass", res, err)
			}
			for _, w := range append(tc.want, "nothing was written", "run tandemctl node install again") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if got := readTree(t, o.Prefix); !mapsEqual(got, tc.tree) || len(res.Changes) != 0 {
				t.Errorf("a refused install changed the tree or reports changes %+v", res.Changes)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestInstallAcceptsFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tree    map[string]string
		kubelet []string
	}{
		{name: "flags naming the proxy's socket",
			tree: with(debian(), "var/lib/kubelet/kubeadm-flags.env",
				`KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/tandem/tandem.sock --image-service-endpoint /var/run/tandem/tandem.sock"`+"\n"),
			kubelet: kubeadmKubelet("--container-runtime-endpoint", "unix:///var/run/tandem/tandem.sock")},
		{name: "commented out", tree: with(debian(), "etc/default/kubelet", "#KUBELET_EXTRA_ARGS=--container-runtime-endpoint="+containerd+"\n")},
		{name: "a variable ExecStart does not pass", tree: with(debian(), "etc/default/kubelet", "OTHER_ARGS=--container-runtime-endpoint="+containerd+"\n")},
		{name: "an ExecStart= a later drop-in replaces",
			tree: with(debian(), "usr/lib/systemd/system/kubelet.service", "[Service]\nExecStart=/usr/bin/kubelet --container-runtime-endpoint="+containerd+"\n")},
		{name: "RPM node: /etc/default/kubelet is not read",
			tree: with(rpm(), "etc/default/kubelet", "KUBELET_EXTRA_ARGS=--container-runtime-endpoint="+containerd+"\n")},
		{name: "another program with the flag", kubelet: nil,
			tree: debian()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(t)
			writeTree(t, o.Prefix, tc.tree)
			if tc.kubelet != nil {
				addKubelet(t, o.ProcRoot, "4242", "kubelet", tc.kubelet...)
			}
			addKubelet(t, o.ProcRoot, "77", "crictl", "crictl", "--runtime-endpoint", containerd, "--container-runtime-endpoint="+containerd)
			if _, err := Install(o); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestInstallConfigDir: where the drop-in goes, and how kubelet is made to read it.
func TestInstallConfigDir(t *testing.T) {
	t.Parallel()
	const dflt = "/etc/kubernetes/kubelet.conf.d"
	arg := "--config-dir=" + dflt
	appended := "# tandemctl node install added " + arg + " to the next line; tandemctl node uninstall removes it.\n"
	tests := []struct {
		name string
		tree map[string]string
		// kubelet is the running kubelet's command line; nil for none.
		kubelet []string
		change  func(*Options)
		// wantDir is where the drop-in goes; wantEnv the environment file's path and content
		// after install, "" when install leaves every environment file alone.
		wantDir, wantEnv, wantEnvData string
		wantWarning                   string
	}{
		{name: "Debian, no /etc/default/kubelet: created",
			tree: debian(), kubelet: kubeadmKubelet(),
			wantDir: dflt, wantEnv: "etc/default/kubelet",
			wantEnvData: "# tandemctl node install created this file to give kubelet " + arg + "; tandemctl node uninstall removes it.\nKUBELET_EXTRA_ARGS=" + arg + "\n"},
		{name: "Debian, arguments there already: appended, quoting kept",
			tree:    with(debian(), "etc/default/kubelet", "# site\nKUBELET_EXTRA_ARGS=\"--node-ip=10.0.0.2 --max-pods=200\"\n"),
			kubelet: kubeadmKubelet("--node-ip=10.0.0.2", "--max-pods=200"),
			wantDir: dflt, wantEnv: "etc/default/kubelet",
			wantEnvData: "# site\n" + appended + "KUBELET_EXTRA_ARGS=\"--node-ip=10.0.0.2 --max-pods=200 " + arg + "\"\n"},
		{name: "RHEL: /etc/sysconfig/kubelet, though /etc/default exists",
			tree:    rpm(),
			wantDir: dflt, wantEnv: "etc/sysconfig/kubelet", wantEnvData: appended + "KUBELET_EXTRA_ARGS=" + arg + "\n"},
		{name: "the older packages' drop-in in /etc",
			tree: with(debian(), debDropInPath, "", "etc/systemd/system/kubelet.service.d/10-kubeadm.conf", fmt.Sprintf(kubeadmDropIn, debianEnvFile),
				"etc/default/kubelet", "KUBELET_EXTRA_ARGS=\n"),
			wantDir: dflt, wantEnv: "etc/default/kubelet", wantEnvData: appended + "KUBELET_EXTRA_ARGS=" + arg + "\n"},
		{name: "kubeadm's kubeletExtraArgs set one: used",
			tree:    with(debian(), "var/lib/kubelet/kubeadm-flags.env", `KUBELET_KUBEADM_ARGS="--config-dir=/etc/kubelet.d --pod-infra-container-image=registry.k8s.io/pause:3.10"`+"\n"),
			kubelet: kubeadmKubelet("--config-dir=/etc/kubelet.d"),
			wantDir: "/etc/kubelet.d"},
		{name: "the operator's own in /etc/default/kubelet: used, file left alone",
			tree:    with(debian(), "etc/default/kubelet", "KUBELET_EXTRA_ARGS=--config-dir /etc/kubelet.d\n"),
			wantDir: "/etc/kubelet.d"},
		{name: "only the running kubelet has one: used",
			tree: debian(), kubelet: kubeadmKubelet("--config-dir", "/run/kubelet.d"),
			wantDir: "/run/kubelet.d"},
		{name: "--kubelet-config-dir where kubelet's flags name another: warned, left alone",
			tree:    with(debian(), "etc/default/kubelet", "KUBELET_EXTRA_ARGS=--config-dir=/etc/kubelet.d\n"),
			change:  func(o *Options) { o.KubeletConfigDir = "/etc/other.d" },
			wantDir: "/etc/other.d", wantWarning: "kubelet's flags set --config-dir=/etc/kubelet.d (" + "ROOT/etc/default/kubelet line 1), so kubelet will not read /etc/other.d/50-tandem-runtime.conf"},
		{name: "--kubelet-config-dir and --kubelet-env-file",
			tree:    debian(),
			change:  func(o *Options) { o.KubeletConfigDir = "/etc/k.d"; o.KubeletEnvFile = "/etc/kubelet.env" },
			wantDir: "/etc/k.d", wantEnv: "etc/kubelet.env",
			wantEnvData: "# tandemctl node install created this file to give kubelet --config-dir=/etc/k.d; tandemctl node uninstall removes it.\nKUBELET_EXTRA_ARGS=--config-dir=/etc/k.d\n"},
		{name: "a unit reading no environment file: warned",
			tree:    map[string]string{"etc/systemd/system/kubelet.service": "[Service]\nExecStart=/usr/local/bin/kubelet --config=/etc/kubelet.yaml\n"},
			kubelet: []string{"/usr/local/bin/kubelet", "--config=/etc/kubelet.yaml"},
			wantDir: dflt, wantWarning: "kubelet runs without --config-dir=/etc/kubernetes/kubelet.conf.d and tandemctl found no environment file to add it to"},
		{name: "a running kubelet without any unit: warned",
			kubelet: []string{"/opt/bin/kubelet"},
			wantDir: dflt, wantWarning: "found no environment file to add it to"},
		{name: "KUBELET_EXTRA_ARGS over two lines: warned, left alone",
			tree:    with(debian(), "etc/default/kubelet", "KUBELET_EXTRA_ARGS=--v=2 \\\n  --max-pods=200\n"),
			wantDir: dflt, wantWarning: "cannot add --config-dir=/etc/kubernetes/kubelet.conf.d to ROOT/etc/default/kubelet: line 1: KUBELET_EXTRA_ARGS is written in a way tandemctl does not edit (it continues onto the next line)"},
		{name: "a later environment file would override it: warned, left alone",
			tree: with(debian(), "etc/systemd/system/kubelet.service.d/20-more.conf", "[Service]\nEnvironmentFile=/etc/kubelet-extra.env\n",
				"etc/kubelet-extra.env", "KUBELET_EXTRA_ARGS=--v=4\n"),
			wantDir: dflt, wantWarning: "adding --config-dir=/etc/kubernetes/kubelet.conf.d to KUBELET_EXTRA_ARGS in ROOT/etc/default/kubelet would not reach kubelet"},
		{name: "no kubelet at all (an install into a prefix): nothing to do",
			wantDir: dflt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOptions(t)
			if tc.change != nil {
				tc.change(&o)
			}
			if tc.tree == nil {
				tc.tree = map[string]string{}
			}
			writeTree(t, o.Prefix, tc.tree)
			if tc.kubelet != nil {
				addKubelet(t, o.ProcRoot, "4242", "kubelet", tc.kubelet...)
			}
			res, err := Install(o)
			if err != nil {
				t.Fatal(err)
			}
			after := readTree(t, o.Prefix)
			if _, ok := after[filepath.Join(tc.wantDir, kubeletConfigFile)[1:]]; !ok {
				t.Errorf("no drop-in in %s", tc.wantDir)
			}
			// Every file of the tree is as it was, but the environment file install edits.
			for p, data := range tc.tree {
				if p != tc.wantEnv && after[p] != data {
					t.Errorf("%s changed:\n%s", p, after[p])
				}
			}
			var envChange []Change
			for _, c := range res.Changes {
				if !strings.Contains(c.Path, "tandem") {
					envChange = append(envChange, c)
				}
			}
			if tc.wantEnv == "" {
				if len(envChange) != 0 {
					t.Errorf("install reports %+v, want no environment file", envChange)
				}
			} else {
				if after[tc.wantEnv] != tc.wantEnvData {
					t.Errorf("%s:\n got %q\nwant %q", tc.wantEnv, after[tc.wantEnv], tc.wantEnvData)
				}
				// Reported last, after the drop-in that creates the directory it names.
				want := Change{Path: filepath.Join(o.Prefix, tc.wantEnv), Action: Wrote}
				if len(res.Changes) == 0 || res.Changes[len(res.Changes)-1] != want || !res.KubeletChanged {
					t.Errorf("install reports %+v, want %+v last and kubelet changed", res.Changes, want)
				}
			}
			warnings := strings.Join(res.Warnings, "\n")
			if want := strings.ReplaceAll(tc.wantWarning, "ROOT", o.Prefix); (want == "") != (warnings == "") || !strings.Contains(warnings, want) {
				t.Errorf("warnings:\n%s\nwant one containing %q", warnings, want)
			}

			// Again: nothing changes, and the environment file is reported unchanged.
			again, err := Install(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range again.Changes {
				if c.Action != Unchanged {
					t.Errorf("second install: %s %s", c.Action, c.Path)
				}
			}
			if tc.wantEnv != "" && !slices.Contains(again.Changes, Change{Path: filepath.Join(o.Prefix, tc.wantEnv), Action: Unchanged}) {
				t.Errorf("second install does not report %s unchanged: %+v", tc.wantEnv, again.Changes)
			}
			if readTree(t, o.Prefix)[tc.wantEnv] != after[tc.wantEnv] {
				t.Errorf("second install changed %s", tc.wantEnv)
			}

			// Uninstall takes out what install added and leaves the rest of the tree as it was.
			o.KubeletConfigDir = "" // found again from what install left
			if tc.change != nil {
				tc.change(&o)
			}
			if _, err := Uninstall(o); err != nil {
				t.Fatal(err)
			}
			if got := readTree(t, o.Prefix); !mapsEqual(got, tc.tree) {
				for p := range got {
					if got[p] != tc.tree[p] {
						t.Errorf("after uninstall %s holds %q, want %q", p, got[p], tc.tree[p])
					}
				}
				for p := range tc.tree {
					if _, ok := got[p]; !ok {
						t.Errorf("after uninstall %s is gone", p)
					}
				}
			}
		})
	}
}

// TestInstallRestartsStaleKubelet: kubelet's files give it the directory, but the running
// kubelet started before they did, so it must restart though no file changes.
func TestInstallRestartsStaleKubelet(t *testing.T) {
	t.Parallel()
	o := testOptions(t)
	writeTree(t, o.Prefix, with(debian(), "etc/default/kubelet", "KUBELET_EXTRA_ARGS=--config-dir=/etc/kubernetes/kubelet.conf.d\n"))
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	addKubelet(t, o.ProcRoot, "4242", "kubelet", kubeadmKubelet()...)
	res, err := Install(o)
	if err != nil || !res.KubeletChanged || res.ProxyChanged {
		t.Errorf("Install = %+v, %v; want kubelet alone to restart", res, err)
	}
	addKubelet(t, o.ProcRoot, "4242", "kubelet", kubeadmKubelet("--config-dir=/etc/kubernetes/kubelet.conf.d/")...)
	if res, err := Install(o); err != nil || res.KubeletChanged {
		t.Errorf("Install with kubelet reading the directory = %+v, %v; want no restart", res, err)
	}
}

// TestUninstallAlwaysWorks: a flag install would refuse does not stop an uninstall, nor does
// an environment file it cannot read.
func TestUninstallAlwaysWorks(t *testing.T) {
	t.Parallel()
	o := testOptions(t)
	writeTree(t, o.Prefix, debian())
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	writeTree(t, o.Prefix, map[string]string{"var/lib/kubelet/kubeadm-flags.env": kubeadmFlagsOld})
	addKubelet(t, o.ProcRoot, "4242", "kubelet", kubeadmKubelet("--container-runtime-endpoint="+containerd)...)
	if err := os.Mkdir(filepath.Join(o.Prefix, "etc/sysconfig"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(o.Prefix, "etc/sysconfig/kubelet"), 0o755); err != nil { // unreadable as a file
		t.Fatal(err)
	}
	changes, err := Uninstall(o)
	if err != nil {
		t.Fatal(err)
	}
	want := []Change{
		{filepath.Join(o.Prefix, defaultDropInPath), Removed},
		{filepath.Join(o.Prefix, "etc/default/kubelet"), Removed}, // install created it
		{filepath.Join(o.Prefix, KubeletUnitDropIn), Removed},
		{filepath.Join(o.Prefix, UnitPath), Removed},
		{filepath.Join(o.Prefix, BinaryPath), Removed},
		{filepath.Join(o.Prefix, PreviousBinaryPath), Absent},
	}
	if !slices.Equal(changes, want) {
		t.Errorf("Uninstall = %+v\nwant %+v", changes, want)
	}
}
