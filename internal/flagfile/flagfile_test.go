package flagfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type values struct {
	state  string
	size   int
	wait   time.Duration
	on     bool
	list   []string
	labels map[string]string
}

func flags() (*pflag.FlagSet, *values) {
	v := &values{}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.StringVar(&v.state, "state-dir", "/default", "")
	fs.IntVar(&v.size, "max-msg-size", 4, "")
	fs.DurationVar(&v.wait, "timeout", time.Second, "")
	fs.BoolVar(&v.on, "run-queue", false, "")
	fs.StringSliceVar(&v.list, "policies", []string{"a", "b"}, "")
	fs.StringToStringVar(&v.labels, "node-labels", nil, "")
	return fs, v
}

var bindings = []Binding{
	{Flag: "state-dir", Key: "stateDir", Env: "T_STATE_DIR"},
	{Flag: "max-msg-size", Key: "maxMsgSize", Env: "T_MAX_MSG_SIZE"},
	{Flag: "timeout", Key: "timeout", Env: "T_TIMEOUT"},
	{Flag: "run-queue", Key: "runQueue"},
	{Flag: "policies", Key: "policies", Env: "T_POLICIES"},
	{Flag: "node-labels", Key: "nodeLabels", Env: "T_NODE_LABELS"},
}

func TestApply(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	full := write("full.yaml", "stateDir: /file\nMAXMSGSIZE: 16777216\ntimeout: 3s\nrunQueue: true\npolicies: [qos, cpuset]\nnodeLabels: {zone: a, note: \"x,y\"}\nnriSocket: /nri.sock\n")
	tests := []struct {
		name    string
		args    []string
		file    string
		env     map[string]string
		want    values
		wantErr string
	}{
		{name: "defaults", want: values{state: "/default", size: 4, wait: time.Second, list: []string{"a", "b"}, labels: map[string]string{}}},
		{name: "file, keys in any case, lists and mappings", file: full,
			want: values{state: "/file", size: 16777216, wait: 3 * time.Second, on: true, list: []string{"qos", "cpuset"}, labels: map[string]string{"zone": "a", "note": "x,y"}}},
		{name: "JSON file", file: write("c.json", `{"stateDir": "/json", "policies": []}`),
			want: values{state: "/json", size: 4, wait: time.Second, list: []string{}, labels: map[string]string{}}},
		{name: "empty file", file: write("empty.yaml", ""), want: values{state: "/default", size: 4, wait: time.Second, list: []string{"a", "b"}, labels: map[string]string{}}},
		{name: "env beats file", file: full, env: map[string]string{"T_STATE_DIR": "/env", "T_POLICIES": "qos,batch", "T_NODE_LABELS": "zone=b"},
			want: values{state: "/env", size: 16777216, wait: 3 * time.Second, on: true, list: []string{"qos", "batch"}, labels: map[string]string{"zone": "b"}}},
		{name: "flag beats env", file: full, args: []string{"--state-dir", "/flag"}, env: map[string]string{"T_STATE_DIR": "/env"},
			want: values{state: "/flag", size: 16777216, wait: 3 * time.Second, on: true, list: []string{"qos", "cpuset"}, labels: map[string]string{"zone": "a", "note": "x,y"}}},
		{name: "misspelt key", file: write("typo.yaml", "stateDirr: /x\n"), wantErr: "unknown keys statedirr"},
		{name: "bad value names the key", file: write("bad.yaml", "timeout: 5\n"), wantErr: "key timeout"},
		{name: "list for a scalar", file: write("list.yaml", "stateDir: [a]\n"), wantErr: "a list where one value is wanted"},
		{name: "bad env names the variable", env: map[string]string{"T_MAX_MSG_SIZE": "big"}, wantErr: "T_MAX_MSG_SIZE"},
		{name: "key twice", file: write("twice.yaml", "stateDir: /a\nstatedir: /b\n"), wantErr: "given twice"},
		{name: "not a mapping", file: write("list2.yaml", "- a\n"), wantErr: "want a mapping"},
		{name: "missing file", file: filepath.Join(dir, "nope.yaml"), wantErr: "nope.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs, got := flags()
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := Apply(fs, bindings, Source{File: tt.file, Getenv: func(k string) string { return tt.env[k] }, Ignored: []string{"nriSocket"}})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Apply = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
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

func equal(a, b values) bool {
	if a.state != b.state || a.size != b.size || a.wait != b.wait || a.on != b.on || strings.Join(a.list, "|") != strings.Join(b.list, "|") || len(a.labels) != len(b.labels) {
		return false
	}
	for k, v := range a.labels {
		if b.labels[k] != v {
			return false
		}
	}
	return true
}
