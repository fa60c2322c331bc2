package flagfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type values struct {
	config string
	state  string
	size   int
	wait   time.Duration
	on     bool
	list   []string
	labels map[string]string
	cpu    int64
	policy string
}

// command is a binary's settings as the agent and tandem-extender bind them: flags, and two nested
// keys that only the file and the environment set.
func command() (Command, *values) {
	v := &values{}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.StringVar(&v.config, "config", "", "")
	fs.StringVar(&v.state, "state-dir", "/default", "")
	fs.IntVar(&v.size, "max-msg-size", 4, "")
	fs.DurationVar(&v.wait, "timeout", time.Second, "")
	fs.BoolVar(&v.on, "run-queue", false, "")
	fs.StringSliceVar(&v.list, "policies", []string{"a", "b"}, "")
	fs.StringToStringVar(&v.labels, "node-labels", nil, "")
	keys := pflag.NewFlagSet("t keys", pflag.ContinueOnError)
	keys.Int64Var(&v.cpu, "thresholds.cpu", 65, "")
	keys.StringVar(&v.policy, "expired.batchPods", "Reject", "")
	return Command{
		Flags: fs,
		Keys:  keys,
		Bindings: []Binding{
			{Flag: "state-dir", Key: "stateDir", Env: EnvName("T_", "state-dir")},
			{Flag: "max-msg-size", Key: "maxMsgSize", Env: EnvName("T_", "max-msg-size")},
			{Flag: "timeout", Key: "timeout", Env: "T_TIMEOUT"},
			{Flag: "run-queue", Key: "runQueue"},
			{Flag: "policies", Key: "policies", Env: "T_POLICIES"},
			{Flag: "node-labels", Key: "nodeLabels", Env: "T_NODE_LABELS"},
			{Flag: "thresholds.cpu", Key: "thresholds.cpu", Env: EnvName("T_", "thresholds.cpu")},
			{Flag: "expired.batchPods", Key: "expired.batchPods"},
		},
		ConfigFlag: "config",
		ConfigEnv:  "T_CONFIG",
		Ignored:    []string{"nriSocket"},
	}, v
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := write("full.yaml", "stateDir: /file\nMAXMSGSIZE: 16777216\ntimeout: 3s\nrunQueue: true\npolicies: [qos, cpuset]\n"+
		"nodeLabels: {Zone: a, note: \"x,y\"}\nnriSocket: /nri.sock\nThresholds:\n  CPU: 70\nexpired:\n  batchPods: Pass\n")
	defaults := values{state: "/default", size: 4, wait: time.Second, list: []string{"a", "b"}, labels: map[string]string{}, cpu: 65, policy: "Reject"}
	fromFull := values{config: full, state: "/file", size: 16777216, wait: 3 * time.Second, on: true, list: []string{"qos", "cpuset"},
		labels: map[string]string{"Zone": "a", "note": "x,y"}, cpu: 70, policy: "Pass"}
	with := func(v values, change func(*values)) values {
		v.list = append([]string(nil), v.list...)
		change(&v)
		return v
	}
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		want     values
		wantFile string
		wantErr  string
	}{
		{name: "defaults", want: defaults},
		{name: "file: keys in any case, lists, mappings, nested keys", args: []string{"--config", full}, want: fromFull, wantFile: full},
		{name: "file named by the environment", env: map[string]string{"T_CONFIG": full}, want: with(fromFull, func(v *values) { v.config = "" }), wantFile: full},
		{name: "JSON file", args: []string{"--config=" + write("c.json", `{"stateDir": "/json", "policies": [], "thresholds": {"cpu": 10}}`)},
			want: with(defaults, func(v *values) {
				v.config = filepath.Join(dir, "c.json")
				v.state = "/json"
				v.list = []string{}
				v.cpu = 10
			}), wantFile: filepath.Join(dir, "c.json")},
		{name: "empty file", args: []string{"--config", write("empty.yaml", "")}, want: with(defaults, func(v *values) { v.config = filepath.Join(dir, "empty.yaml") }), wantFile: filepath.Join(dir, "empty.yaml")},
		{name: "env beats file", args: []string{"--config", full}, env: map[string]string{"T_STATE_DIR": "/env", "T_POLICIES": "qos,batch", "T_NODE_LABELS": "zone=b", "T_THRESHOLDS_CPU": "80"},
			want: with(fromFull, func(v *values) {
				v.state = "/env"
				v.list = []string{"qos", "batch"}
				v.labels = map[string]string{"zone": "b"}
				v.cpu = 80
			}), wantFile: full},
		{name: "flag beats env", args: []string{"--config", full, "--state-dir", "/flag"}, env: map[string]string{"T_STATE_DIR": "/env"},
			want: with(fromFull, func(v *values) { v.state = "/flag" }), wantFile: full},
		{name: "misspelt key, with its line", args: []string{"--config", write("typo.yaml", "timeout: 1s\nstateDirr: /x\n")}, wantErr: "unknown keys statedirr (line 2)"},
		{name: "misspelt nested key", args: []string{"--config", write("typo2.yaml", "thresholds:\n  cpu: 1\n  cpuu: 2\n")}, wantErr: "unknown keys thresholds.cpuu (line 3)"},
		{name: "scalar for a mapping of keys", args: []string{"--config", write("flat.yaml", "thresholds: 5\n")}, wantErr: "a mapping of keys wanted"},
		{name: "bad value names the file, line, key and flag", args: []string{"--config", write("bad.yaml", "stateDir: /s\ntimeout: 5\n")}, wantErr: "bad.yaml:2: key timeout: "},
		{name: "bad value names the flag", args: []string{"--config", filepath.Join(dir, "bad.yaml")}, wantErr: "--timeout's values"},
		{name: "bad nested value", args: []string{"--config", write("badcpu.yaml", "thresholds:\n  cpu: lots\n")}, wantErr: "badcpu.yaml:2: key thresholds.cpu"},
		{name: "list for a scalar", args: []string{"--config", write("list.yaml", "stateDir: [a]\n")}, wantErr: "a list where one value is wanted"},
		{name: "bad env names the variable and the flag", env: map[string]string{"T_MAX_MSG_SIZE": "big"}, wantErr: "T_MAX_MSG_SIZE=\"big\""},
		{name: "key twice", args: []string{"--config", write("twice.yaml", "stateDir: /a\nstatedir: /b\n")}, wantErr: "given twice"},
		{name: "nested key twice", args: []string{"--config", write("twice2.yaml", "thresholds: {cpu: 1, CPU: 2}\n")}, wantErr: "given twice"},
		{name: "not a mapping", args: []string{"--config", write("list2.yaml", "- a\n")}, wantErr: "want a mapping"},
		{name: "missing file", args: []string{"--config", filepath.Join(dir, "nope.yaml")}, wantErr: "nope.yaml"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "unknown flag: --nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd, got := command()
			file, err := cmd.Load(tt.args, func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if file != tt.wantFile {
				t.Errorf("config file %q, want %q", file, tt.wantFile)
			}
			if got.labels == nil {
				got.labels = map[string]string{}
			}
			if !equal(*got, tt.want) {
				t.Fatalf("values = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestLoadHelp(t *testing.T) {
	t.Parallel()
	cmd, _ := command()
	cmd.Flags.SetOutput(new(strings.Builder))
	if _, err := cmd.Load([]string{"--help"}, func(string) string { return "" }); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("Load(--help) = %v, want pflag.ErrHelp", err)
	}
}

func TestUndefinedBinding(t *testing.T) {
	t.Parallel()
	cmd, _ := command()
	cmd.Bindings = append(cmd.Bindings, Binding{Flag: "nope", Key: "nope"})
	if _, err := cmd.Load(nil, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("Load with a binding of no flag = %v, want an error naming it", err)
	}
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ prefix, name, want string }{
		{"TANDEM_", "state-dir", "TANDEM_STATE_DIR"},
		{"TANDEM_EXTENDER_", "usageThresholds.cpu", "TANDEM_EXTENDER_USAGETHRESHOLDS_CPU"},
		{"TANDEM_EXTENDER_", "maxRequestBodyBytes", "TANDEM_EXTENDER_MAXREQUESTBODYBYTES"},
	} {
		if got := EnvName(tt.prefix, tt.name); got != tt.want {
			t.Errorf("EnvName(%q, %q) = %q, want %q", tt.prefix, tt.name, got, tt.want)
		}
	}
}

func equal(a, b values) bool {
	if a.config != b.config || a.state != b.state || a.size != b.size || a.wait != b.wait || a.on != b.on || a.cpu != b.cpu || a.policy != b.policy ||
		strings.Join(a.list, "|") != strings.Join(b.list, "|") || len(a.labels) != len(b.labels) {
		return false
	}
	for k, v := range a.labels {
		if b.labels[k] != v {
			return false
		}
	}
	return true
}
