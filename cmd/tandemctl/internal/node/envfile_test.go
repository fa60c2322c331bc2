package node

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseEnvFile(t *testing.T) {
	t.Parallel()
	type kv struct {
		key, value string
		line       int
	}
	tests := []struct {
		name, data string
		want       []kv
	}{
		{"kubeadm-flags.env", `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9"` + "\n",
			[]kv{{"KUBELET_KUBEADM_ARGS", "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.9", 1}}},
		{"empty value", "KUBELET_EXTRA_ARGS=\n", []kv{{"KUBELET_EXTRA_ARGS", "", 1}}},
		{"comments and blanks", "# KUBELET_EXTRA_ARGS=--a\n\n; X=1\n  A = b c  \n", []kv{{"A", "b c", 4}}},
		{"single quotes keep backslashes", `A='x\ y "z"'`, []kv{{"A", `x\ y "z"`, 1}}},
		{"double quote escapes", `A="a \"b\" \$c \n"`, []kv{{"A", `a "b" $c \n`, 1}}},
		{"quote mid-value", `A=x"y z"w`, []kv{{"A", "xy zw", 1}}},
		{"continued unquoted value", "A=--a \\\n--b\nB=c", []kv{{"A", "--a --b", 1}, {"B", "c", 3}}},
		{"continued quoted value", "A=\"--a\n--b\"\n", []kv{{"A", "--a\n--b", 1}}},
		{"backslash ending a comment", "# a \\\nA=1\n# b \\x\nB=2\n", []kv{{"A", "1", 2}, {"B", "2", 4}}},
		{"line without =", "garbage\nA=1\n", []kv{{"A", "1", 2}}},
		{"carriage returns end lines", "A=1\r\nB=2\r\n", []kv{{"A", "1", 1}, {"B", "2", 2}}},
		{"later assignment kept too", "A=1\nA=2\n", []kv{{"A", "1", 1}, {"A", "2", 2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []kv
			for _, a := range parseEnvFile([]byte(tc.data)) {
				got = append(got, kv{a.key, a.value, a.line})
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("parseEnvFile(%q)\n got %+v\nwant %+v", tc.data, got, tc.want)
			}
		})
	}
}

const testArg = "--config-dir=/etc/kubernetes/kubelet.conf.d"

func TestAddEnvArg(t *testing.T) {
	t.Parallel()
	appended := "# tandemctl node install added " + testArg + " to the next line; tandemctl node uninstall removes it.\n"
	added := "# tandemctl node install added the next line to give kubelet " + testArg + "; tandemctl node uninstall removes it.\n"
	tests := []struct {
		name    string
		old     string
		exists  bool
		want    string
		wantErr bool
	}{
		{name: "no file", exists: false,
			want: "# tandemctl node install created this file to give kubelet " + testArg + "; tandemctl node uninstall removes it.\nKUBELET_EXTRA_ARGS=" + testArg + "\n"},
		{name: "empty file", exists: true, want: added + "KUBELET_EXTRA_ARGS=" + testArg + "\n"},
		{name: "no KUBELET_EXTRA_ARGS, no final newline", old: "# site settings\nHTTP_PROXY=http://proxy:3128", exists: true,
			want: added + "KUBELET_EXTRA_ARGS=" + testArg + "\n# site settings\nHTTP_PROXY=http://proxy:3128"},
		{name: "empty value", old: "KUBELET_EXTRA_ARGS=\n", exists: true, want: appended + "KUBELET_EXTRA_ARGS=" + testArg + "\n"},
		{name: "empty value, trailing blanks", old: "KUBELET_EXTRA_ARGS=  \n", exists: true, want: appended + "KUBELET_EXTRA_ARGS=" + testArg + "  \n"},
		{name: "empty quotes", old: `KUBELET_EXTRA_ARGS=""` + "\n", exists: true, want: appended + `KUBELET_EXTRA_ARGS="` + testArg + `"` + "\n"},
		{name: "unquoted", old: "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.2 --max-pods=200\n", exists: true,
			want: appended + "KUBELET_EXTRA_ARGS=--node-ip=10.0.0.2 --max-pods=200 " + testArg + "\n"},
		{name: "double quoted, escapes kept", old: `KUBELET_EXTRA_ARGS="--node-labels=a=b --v=2 --x=\"y\""` + "\n", exists: true,
			want: appended + `KUBELET_EXTRA_ARGS="--node-labels=a=b --v=2 --x=\"y\" ` + testArg + `"` + "\n"},
		{name: "single quoted", old: "A=1\nKUBELET_EXTRA_ARGS='--v=2'\nB=2\n", exists: true,
			want: "A=1\n" + appended + "KUBELET_EXTRA_ARGS='--v=2 " + testArg + "'\nB=2\n"},
		{name: "last assignment wins", old: "KUBELET_EXTRA_ARGS=--v=1\nKUBELET_EXTRA_ARGS=--v=2\n", exists: true,
			want: "KUBELET_EXTRA_ARGS=--v=1\n" + appended + "KUBELET_EXTRA_ARGS=--v=2 " + testArg + "\n"},
		{name: "indented, spaces around =", old: "  KUBELET_EXTRA_ARGS = --v=2", exists: true,
			want: appended + "  KUBELET_EXTRA_ARGS = --v=2 " + testArg},
		{name: "continued onto the next line", old: "KUBELET_EXTRA_ARGS=--v=2 \\\n  --max-pods=200\n", exists: true, wantErr: true},
		{name: "quotes not around the whole value", old: `KUBELET_EXTRA_ARGS="--v=2" --max-pods=200` + "\n", exists: true, wantErr: true},
		{name: "quote inside unquoted value", old: `KUBELET_EXTRA_ARGS=--node-labels="a b"` + "\n", exists: true, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := addEnvArg([]byte(tc.old), tc.exists, testArg)
			if tc.wantErr {
				if !errors.Is(err, errEnvNotEditable) {
					t.Fatalf("addEnvArg = %q, %v; want errEnvNotEditable", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("addEnvArg\n got %q\nwant %q", got, tc.want)
			}
			// What systemd reads: every earlier argument, then the flag.
			a, _ := envValue(parseEnvFile(got), extraArgsKey)
			before, _ := envValue(parseEnvFile([]byte(tc.old)), extraArgsKey)
			if wantWords := append(strings.Fields(before.value), testArg); !slices.Equal(strings.Fields(a.value), wantWords) {
				t.Errorf("KUBELET_EXTRA_ARGS reads %q, want %q", strings.Fields(a.value), wantWords)
			}
			// Uninstall gives the file back byte for byte.
			back, changed, gone := removeEnvArg(got)
			if !changed || gone != !tc.exists || (tc.exists && string(back) != tc.old) {
				t.Errorf("removeEnvArg = %q, changed %v, gone %v; want %q back (gone: %v)", back, changed, gone, tc.old, !tc.exists)
			}
		})
	}
}

func TestRemoveEnvArg(t *testing.T) {
	t.Parallel()
	marker := "# tandemctl node install added " + testArg + " to the next line; tandemctl node uninstall removes it.\n"
	tests := []struct {
		name, data, want string
		changed          bool
	}{
		{name: "no marker: the operator's own flag stays", data: "KUBELET_EXTRA_ARGS=" + testArg + "\n", want: "KUBELET_EXTRA_ARGS=" + testArg + "\n"},
		{name: "line edited since: only the flag goes", data: marker + "KUBELET_EXTRA_ARGS=--v=2 " + testArg + " --max-pods=10\nA=1\n",
			want: "KUBELET_EXTRA_ARGS=--v=2 --max-pods=10\nA=1\n", changed: true},
		{name: "flag taken out by hand: only the marker goes", data: marker + "KUBELET_EXTRA_ARGS=--v=2\n", want: "KUBELET_EXTRA_ARGS=--v=2\n", changed: true},
		{name: "a longer flag is not ours", data: marker + "KUBELET_EXTRA_ARGS=" + testArg + "-old\n", want: "KUBELET_EXTRA_ARGS=" + testArg + "-old\n", changed: true},
		{name: "created file edited since stays",
			data: "# tandemctl node install created this file to give kubelet " + testArg + "; tandemctl node uninstall removes it.\nKUBELET_EXTRA_ARGS=" + testArg + "\nHTTP_PROXY=x\n",
			want: "HTTP_PROXY=x\n", changed: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, changed, gone := removeEnvArg([]byte(tc.data))
			if string(got) != tc.want || changed != tc.changed || gone {
				t.Errorf("removeEnvArg = %q, changed %v, gone %v; want %q, changed %v", got, changed, gone, tc.want, tc.changed)
			}
		})
	}
}

func TestSplitWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{`"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/b.conf --kubeconfig=/k.conf" "B=1"`, []string{"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/b.conf --kubeconfig=/k.conf", "B=1"}},
		{`/usr/bin/kubelet  $KUBELET_EXTRA_ARGS	--v=2`, []string{"/usr/bin/kubelet", "$KUBELET_EXTRA_ARGS", "--v=2"}},
		{`A='x y'z B=a\ b ""`, []string{"A=x yz", "B=a b", ""}},
	}
	for _, tc := range tests {
		if got := splitWords(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("splitWords(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzEnvFile: the parser takes anything, and whatever addEnvArg accepts, systemd reads with
// the flag last in KUBELET_EXTRA_ARGS and removeEnvArg turns back into the same bytes.
func FuzzEnvFile(f *testing.F) {
	for _, s := range []string{"", "KUBELET_EXTRA_ARGS=\n", `KUBELET_EXTRA_ARGS="--v=2"`, "A=1\r\nKUBELET_EXTRA_ARGS='x'  \n", "# c \\\nKUBELET_EXTRA_ARGS=a\\ b"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		before, _ := envValue(parseEnvFile(data), extraArgsKey)
		if bytes.Contains(data, []byte(markerHead)) {
			return // not a file install would edit: it has edited it
		}
		got, err := addEnvArg(data, true, testArg)
		if err != nil {
			return
		}
		a, ok := envValue(parseEnvFile(got), extraArgsKey)
		if want := append(strings.Fields(before.value), testArg); !ok || !slices.Equal(strings.Fields(a.value), want) {
			t.Fatalf("after addEnvArg(%q) = %q, KUBELET_EXTRA_ARGS reads %q, want %q", data, got, strings.Fields(a.value), want)
		}
		if back, changed, _ := removeEnvArg(got); !changed || !bytes.Equal(back, data) {
			t.Fatalf("removeEnvArg(%q) = %q, want %q back", got, back, data)
		}
	})
}
