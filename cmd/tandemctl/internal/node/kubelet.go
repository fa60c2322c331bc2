package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Where a kubeadm node's kubelet gets its command line: kubelet.service and its drop-ins (the
// packages' 10-kubeadm.conf), the environment files that drop-in names, and the flags kubeadm
// writes at join and upgrade.
const (
	kubeadmFlagsEnv = "/var/lib/kubelet/kubeadm-flags.env"
	debianEnvFile   = "/etc/default/kubelet"
	rpmEnvFile      = "/etc/sysconfig/kubelet"
)

// unitDirs are systemd's unit directories, the first winning for a file name found in several.
var unitDirs = []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"}

// kubeadmExecStart is the ExecStart of the packages' 10-kubeadm.conf, assumed where no unit
// was found so that the environment files are still checked.
var kubeadmExecStart = []string{"/usr/bin/kubelet", "$KUBELET_KUBECONFIG_ARGS", "$KUBELET_CONFIG_ARGS", "$KUBELET_KUBEADM_ARGS", "$KUBELET_EXTRA_ARGS"}

// The kubelet flags install looks at: the two that would take kubelet past the proxy, and
// the one that makes kubelet read the drop-in.
const (
	flagRuntimeEndpoint = "--container-runtime-endpoint"
	flagImageEndpoint   = "--image-service-endpoint"
	flagConfigDir       = "--config-dir"
)

// source is where a kubelet flag comes from: a line of a file, or a running kubelet.
type source struct {
	path    string // the file as read, below the prefix
	line    int
	setting string // an environment variable's name, or "ExecStart="
	unit    bool   // path is a unit file: Environment= or ExecStart=
	pid     string // a running kubelet's; path is empty
}

func (s source) String() string {
	if s.pid != "" {
		return "kubelet (pid " + s.pid + ")"
	}
	return fmt.Sprintf("%s line %d", s.path, s.line)
}

// flagUse is one of the flags above on kubelet's command line.
type flagUse struct {
	name, value string
	raw         string // as written: --name=value or --name value
	from        source
}

// kubeletView is what kubelet's command line is made of on this node, as systemd would build it.
type kubeletView struct {
	// unit is the file whose ExecStart= starts kubelet; empty when none was found and
	// kubeadm's was assumed.
	unit string
	// extraArgs: ExecStart passes $KUBELET_EXTRA_ARGS.
	extraArgs bool
	// envFiles are the EnvironmentFile= paths kubelet.service names (node paths), in order.
	envFiles []string
	// flags are the flags above on the command line the unit builds, in order.
	flags []flagUse
	// procs are the running kubelets, by pid.
	procs []kubeletProc
}

type kubeletProc struct {
	pid   string
	flags []flagUse
}

// present reports whether there is a kubelet to point at the proxy: a unit or a process.
func (v kubeletView) present() bool { return v.unit != "" || len(v.procs) > 0 }

// configDir returns the --config-dir the unit gives kubelet (the last one, as kubelet's flag
// parsing keeps the last), and where it is set.
func configDir(flags []flagUse) (string, source) {
	dir, from := "", source{}
	for _, f := range flags {
		if f.name == flagConfigDir {
			dir, from = f.value, f.from
		}
	}
	return dir, from
}

// readKubelet reads kubelet's unit, drop-ins and environment files below o.Prefix, with the
// files of override in place of what is on disk (to see what an edit would do), and the
// kubelets running in o.ProcRoot. extraEnv, if not empty, is read as one more environment file.
// A file that cannot be read for another reason than its absence is an error.
func readKubelet(o Options, extraEnv string, override map[string][]byte) (kubeletView, error) {
	var v kubeletView
	read := func(node string) ([]byte, string, error) {
		path := filepath.Join(o.Prefix, node)
		if b, ok := override[node]; ok {
			return b, path, nil
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, path, nil
		}
		if err != nil {
			return nil, path, fmt.Errorf("read %s, which kubelet's flags come from: %w", path, err)
		}
		return b, path, nil
	}

	// The unit, then its drop-ins in name order; a drop-in in a later directory is masked by
	// one of the same name in an earlier one.
	var units []string
	for _, d := range unitDirs {
		if st, err := os.Stat(filepath.Join(o.Prefix, d, "kubelet.service")); err == nil && !st.IsDir() {
			units = append(units, filepath.Join(d, "kubelet.service"))
			break
		}
	}
	dropIns := map[string]string{}
	for _, d := range unitDirs {
		matches, _ := filepath.Glob(filepath.Join(o.Prefix, d, "kubelet.service.d", "*.conf"))
		for _, m := range matches {
			if _, ok := dropIns[filepath.Base(m)]; !ok {
				dropIns[filepath.Base(m)] = filepath.Join(d, "kubelet.service.d", filepath.Base(m))
			}
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range dropIns {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		units = append(units, dropIns[n])
	}

	type envVar struct {
		value string
		from  source
	}
	env := map[string]envVar{}
	var exec []string
	var execFrom source
	for _, u := range units {
		data, path, err := read(u)
		if err != nil {
			return v, err
		}
		for _, l := range parseUnit(data) {
			from := source{path: path, line: l.line, unit: true}
			switch l.key {
			case "Environment":
				if l.value == "" {
					clear(env)
				}
				for _, w := range splitWords(l.value) {
					if k, val, ok := strings.Cut(w, "="); ok {
						from.setting = k
						env[k] = envVar{val, from}
					}
				}
			case "EnvironmentFile":
				if l.value == "" {
					v.envFiles = nil
				} else {
					v.envFiles = append(v.envFiles, strings.TrimPrefix(l.value, "-"))
				}
			case "ExecStart":
				exec, execFrom = splitWords(l.value), from
				execFrom.setting = "ExecStart="
				if len(exec) == 0 {
					v.unit = ""
				} else {
					v.unit = path
				}
			}
		}
	}
	if v.unit == "" {
		exec, execFrom = kubeadmExecStart, source{}
		v.envFiles = []string{kubeadmFlagsEnv, debianEnvFile, rpmEnvFile}
	}
	if extraEnv != "" && !slices.Contains(v.envFiles, extraEnv) {
		v.envFiles = append(v.envFiles, extraEnv)
	}
	// Files override Environment=, and a later file an earlier one, as in systemd.
	for _, f := range v.envFiles {
		data, path, err := read(f)
		if err != nil {
			return v, err
		}
		for _, a := range parseEnvFile(data) {
			env[a.key] = envVar{a.value, source{path: path, line: a.line, setting: a.key}}
		}
	}

	// systemd splits a word that is a lone $VAR at blanks and substitutes ${VAR} within a word.
	var words []string
	var froms []source
	for i, w := range exec {
		if i == 0 {
			continue // the binary
		}
		name, whole := strings.CutPrefix(w, "$")
		if whole && strings.HasPrefix(name, "{") && strings.HasSuffix(name, "}") {
			name = name[1 : len(name)-1]
		}
		if whole && varName.MatchString(name) {
			if name == extraArgsKey {
				v.extraArgs = true
			}
			for _, f := range strings.Fields(env[name].value) {
				words, froms = append(words, f), append(froms, env[name].from)
			}
			continue
		}
		words = append(words, varRef.ReplaceAllStringFunc(w, func(ref string) string { return env[ref[2:len(ref)-1]].value }))
		froms = append(froms, execFrom)
	}
	v.flags = findFlags(words, froms)

	if o.ProcRoot != "" {
		procs, err := runningKubelets(o.ProcRoot)
		if err != nil {
			return v, err
		}
		v.procs = procs
	}
	return v, nil
}

var (
	varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	varRef  = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}`)
)

// findFlags returns the flags install looks at among args, each from where its word came.
func findFlags(args []string, froms []source) []flagUse {
	var out []flagUse
	for i, a := range args {
		for _, name := range []string{flagRuntimeEndpoint, flagImageEndpoint, flagConfigDir} {
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				out = append(out, flagUse{name: name, value: v, raw: a, from: froms[i]})
			} else if a == name && i+1 < len(args) {
				out = append(out, flagUse{name: name, value: args[i+1], raw: a + " " + args[i+1], from: froms[i]})
			}
		}
	}
	return out
}

// runningKubelets returns the processes named kubelet in procRoot and their flags.
func runningKubelets(procRoot string) ([]kubeletProc, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("list %s to find a running kubelet: %w", procRoot, err)
	}
	var out []kubeletProc
	for _, e := range entries {
		comm, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "kubelet" {
			continue // not a process, gone, or another program
		}
		raw, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		froms := make([]source, len(args))
		for i := range froms {
			froms[i] = source{pid: e.Name()}
		}
		out = append(out, kubeletProc{pid: e.Name(), flags: findFlags(args, froms)})
	}
	slices.SortFunc(out, func(a, b kubeletProc) int { return strings.Compare(a.pid, b.pid) })
	return out, nil
}

// unitLine is one Key=value of a unit file's [Service] section.
type unitLine struct {
	key, value string
	line       int
}

// parseUnit returns the [Service] settings of a unit file, lines continued with a trailing
// backslash joined (comment lines inside a continuation skipped), as systemd reads them.
func parseUnit(data []byte) []unitLine {
	var out []unitLine
	section := ""
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		first := i + 1
		l := strings.TrimSpace(lines[i])
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			l = strings.TrimSuffix(l, `\`) + " "
			i++
			if n := strings.TrimSpace(lines[i]); n != "" && (n[0] == '#' || n[0] == ';') {
				continue
			}
			l += strings.TrimSpace(lines[i])
		}
		if strings.HasPrefix(l, "[") {
			section = l
			continue
		}
		k, val, ok := strings.Cut(l, "=")
		if ok && section == "[Service]" {
			out = append(out, unitLine{key: strings.TrimSpace(k), value: strings.TrimSpace(val), line: first})
		}
	}
	return out
}

// splitWords splits a unit setting into words as systemd does for Environment= and
// ExecStart=: at blanks, with "..." and '...' quoting and backslash escapes.
func splitWords(s string) []string {
	var out []string
	var w strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && quote != '\'':
			i++
			w.WriteByte(s[i])
			in = true
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			w.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// ErrKubeletFlagBypass says a kubelet flag names another runtime endpoint than the proxy's, and
// flags beat kubelet's configuration files, so the drop-in could not point kubelet at the proxy.
var ErrKubeletFlagBypass = errors.New("a kubelet flag would take kubelet past tandem-proxy")

// checkBypass returns an error wrapping ErrKubeletFlagBypass that says, for each runtime or
// image endpoint flag other than the proxy's socket, where it is and how to take it out.
func checkBypass(v kubeletView, listen string) error {
	proxy := func(endpoint string) bool {
		return filepath.Clean(strings.TrimPrefix(endpoint, "unix://")) == filepath.Clean(listen)
	}
	var fixes []string
	for _, f := range v.flags {
		if f.name == flagConfigDir || proxy(f.value) {
			continue
		}
		switch {
		case filepath.Base(f.from.path) == filepath.Base(kubeadmFlagsEnv):
			fixes = append(fixes, fmt.Sprintf("%s: %s has %s: delete it from that line. kubeadm writes this file at kubeadm join and kubeadm upgrade, "+
				"so check it again after either. The flag is not needed: containerRuntimeEndpoint in kubelet's configuration does the same job "+
				"(the drop-in tandemctl writes sets it to the proxy; without the drop-in, /var/lib/kubelet/config.yaml's or kubelet's default, "+
				"unix:///run/containerd/containerd.sock, applies)", f.from, f.from.setting, f.raw))
		case f.from.unit && f.from.setting == "ExecStart=":
			fixes = append(fixes, fmt.Sprintf("%s: ExecStart= has %s: delete it from that line, then run systemctl daemon-reload", f.from, f.raw))
		case f.from.unit:
			fixes = append(fixes, fmt.Sprintf("%s: Environment= sets %s with %s: delete it from that line, then run systemctl daemon-reload", f.from, f.from.setting, f.raw))
		default:
			fixes = append(fixes, fmt.Sprintf("%s: %s has %s: delete it from that line", f.from, f.from.setting, f.raw))
		}
	}
	inFiles := len(fixes) > 0
	for _, p := range v.procs {
		for _, f := range p.flags {
			if f.name == flagConfigDir || proxy(f.value) {
				continue
			}
			if inFiles {
				fixes = append(fixes, fmt.Sprintf("%s runs with %s: once the lines above are fixed, restart it (systemctl restart kubelet)", f.from, f.raw))
			} else {
				fixes = append(fixes, fmt.Sprintf("%s runs with %s, which no file tandemctl read gives it: find where it comes from (systemctl cat kubelet), "+
					"delete it there, then restart kubelet (systemctl restart kubelet)", f.from, f.raw))
			}
		}
	}
	if len(fixes) == 0 {
		return nil
	}
	return fmt.Errorf("%w: a command-line flag beats the containerRuntimeEndpoint and imageServiceEndpoint of %s, so nothing was written. "+
		"Fix this, then run tandemctl node install again:\n  %s", ErrKubeletFlagBypass, kubeletConfigFile, strings.Join(fixes, "\n  "))
}

// discoverConfigDir returns the --config-dir kubelet's files give it (they decide once kubelet
// restarts), else the running kubelet's, else DefaultKubeletConfigDir; and where it was found.
func discoverConfigDir(v kubeletView) (string, string) {
	if dir, from := configDir(v.flags); dir != "" {
		return dir, from.String()
	}
	for _, p := range v.procs {
		if dir, from := configDir(p.flags); dir != "" {
			return dir, from.String()
		}
	}
	return DefaultKubeletConfigDir, "the default"
}

// kubeletPlan is what Install does about kubelet's flags.
type kubeletPlan struct {
	configDir string
	// env is kubelet's environment file with --config-dir added; keep when an earlier install
	// added it, so that it is reported; nil when install has nothing to do with the file.
	env *file
	// restart: a running kubelet lacks the --config-dir its files give it.
	restart  bool
	warnings []string
}

// planKubelet reads kubelet's flags and decides, before anything is written: it refuses a
// flag that would bypass the proxy, resolves the --config-dir, and plans adding it to
// KUBELET_EXTRA_ARGS when kubelet has none.
func planKubelet(o Options) (kubeletPlan, error) {
	var p kubeletPlan
	v, err := readKubelet(o, o.KubeletEnvFile, nil)
	if err != nil {
		return p, err
	}
	if err := checkBypass(v, o.Listen); err != nil {
		return p, err
	}
	have, from := configDir(v.flags)
	p.configDir = o.KubeletConfigDir
	if p.configDir == "" {
		dir, where := discoverConfigDir(v)
		p.configDir = dir
		if err := checkConfigDir(dir, "kubelet's own, "+where); err != nil {
			return p, fmt.Errorf("%w; or pass --kubelet-config-dir", err)
		}
	}
	dropIn := filepath.Join(p.configDir, kubeletConfigFile)
	same := func(a string) bool { return a != "" && filepath.Clean(a) == filepath.Clean(p.configDir) }
	running := slices.ContainsFunc(v.procs, func(k kubeletProc) bool { d, _ := configDir(k.flags); return same(d) })
	target := envTarget(o, v)
	arg := flagConfigDir + "=" + p.configDir
	switch {
	case same(have):
	case have != "":
		p.warnings = append(p.warnings, fmt.Sprintf("kubelet's flags set %s=%s (%s), so kubelet will not read %s: "+
			"run tandemctl node install without --kubelet-config-dir to use %s, or change that flag", flagConfigDir, have, from, dropIn, have))
	case running:
		// Its --config-dir comes from somewhere tandemctl does not read; it stays.
	case target == "" && v.present():
		p.warnings = append(p.warnings, fmt.Sprintf("kubelet runs without %s=%s and tandemctl found no environment file to add it to "+
			"(%s or %s, named by EnvironmentFile= in kubelet.service or its drop-ins, whose KUBELET_EXTRA_ARGS ExecStart= passes), "+
			"so kubelet will not read %s: add %s to kubelet's flags yourself or name the file with --kubelet-env-file, then restart kubelet",
			flagConfigDir, p.configDir, debianEnvFile, rpmEnvFile, dropIn, arg))
	case target == "":
		// No kubelet here (an install into a prefix): nothing to point at the drop-in.
	default:
		path := filepath.Join(o.Prefix, target)
		old, err := os.ReadFile(path)
		exists := err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return p, fmt.Errorf("read %s to add %s to KUBELET_EXTRA_ARGS: %w", path, arg, err)
		}
		mode := fs.FileMode(0o644)
		if st, err := os.Stat(path); err == nil {
			mode = st.Mode().Perm()
		}
		data, err := addEnvArg(old, exists, arg)
		if err != nil {
			p.warnings = append(p.warnings, fmt.Sprintf("cannot add %s to %s: %v; add it to kubelet's flags yourself, then restart kubelet", arg, path, err))
			break
		}
		after, err := readKubelet(o, o.KubeletEnvFile, map[string][]byte{target: data})
		if err != nil {
			return p, err
		}
		if got, _ := configDir(after.flags); !same(got) {
			p.warnings = append(p.warnings, fmt.Sprintf("adding %s to KUBELET_EXTRA_ARGS in %s would not reach kubelet (another setting of KUBELET_EXTRA_ARGS "+
				"or a later %s wins), so tandemctl left the file alone: add %s to kubelet's flags yourself, then restart kubelet", arg, path, flagConfigDir, arg))
			break
		}
		p.env = &file{path: path, mode: mode, data: data, kubelet: true}
		have = p.configDir
	}
	if p.env == nil && target != "" {
		path := filepath.Join(o.Prefix, target)
		if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), markerHead) {
			p.env = &file{path: path, keep: true}
		}
	}
	if same(have) {
		p.restart = slices.ContainsFunc(v.procs, func(k kubeletProc) bool { d, _ := configDir(k.flags); return !same(d) })
	}
	return p, nil
}

// envTarget returns the environment file (a node path) whose KUBELET_EXTRA_ARGS should carry
// --config-dir: --kubelet-env-file, else the one of the packages' two files kubelet.service
// reads and passes on, else "".
func envTarget(o Options, v kubeletView) string {
	if o.KubeletEnvFile != "" {
		return o.KubeletEnvFile
	}
	if v.unit == "" || !v.extraArgs {
		return ""
	}
	deb, rpm := slices.Contains(v.envFiles, debianEnvFile), slices.Contains(v.envFiles, rpmEnvFile)
	if deb && rpm {
		// Both named: the distribution's own convention decides.
		st, err := os.Stat(filepath.Join(o.Prefix, "etc/default"))
		deb = err == nil && st.IsDir()
		rpm = !deb
	}
	switch {
	case deb:
		return debianEnvFile
	case rpm:
		return rpmEnvFile
	}
	return ""
}
