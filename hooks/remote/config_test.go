package remote

import (
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemkit/tandem/hooks"
)

func TestParseFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		file    string
		data    string
		want    *spec
		wantErr []string // each must appear in the error
	}{{
		name: "tandem, every field",
		file: "ignored.json",
		data: `{"name": "cpu-tuner", "endpoint": "unix:///run/cpu-tuner.sock", "stages": ["PreUpdateContainerResources", "PreCreateContainerHook"],
			"failurePolicy": "Ignore", "timeout": "750ms", "order": 1500}`,
		want: &spec{file: "ignored.json", name: "cpu-tuner", endpoint: "unix:///run/cpu-tuner.sock", path: "/run/cpu-tuner.sock",
			stages: []hooks.Stage{hooks.PreCreateContainer, hooks.PreUpdateContainerResources}, policy: hooks.Ignore, timeout: 750 * time.Millisecond, order: 1500},
	}, {
		name: "tandem, defaults: name from the file, Fail, 2s",
		file: "tuner.json",
		data: `{"endpoint": "/run/t.sock", "stages": ["PreRunPodSandbox"], "order": -5}`,
		want: &spec{file: "tuner.json", name: "tuner", endpoint: "/run/t.sock", path: "/run/t.sock",
			stages: []hooks.Stage{hooks.PreRunPodSandbox}, policy: hooks.Fail, timeout: hooks.DefaultTimeout, order: -5},
	}, {
		name: "koordinator, as koordlet writes it",
		file: "koordlet.json",
		data: `{"remote-endpoint": "/var/run/koordlet/koordlet.sock", "failure-policy": "Ignore",
			"runtime-hooks": ["PreRunPodSandbox", "PreCreateContainer", "PreStartContainer", "PreUpdateContainerResources", "PostStopPodSandbox", "PreRemoveRunPodSandbox"]}`,
		want: &spec{file: "koordlet.json", name: "koordlet", endpoint: "/var/run/koordlet/koordlet.sock", path: "/var/run/koordlet/koordlet.sock",
			stages: []hooks.Stage{hooks.PreRunPodSandbox, hooks.PostStopPodSandbox, hooks.PreCreateContainer, hooks.PreStartContainer, hooks.PreUpdateContainerResources},
			policy: hooks.Ignore, timeout: hooks.DefaultTimeout, koordinator: true},
	}, {
		name: "koordinator without a policy ignores failures, as koord-runtime-proxy does",
		file: "k.json",
		data: `{"remote-endpoint": "unix:///k.sock", "runtime-hooks": ["PreCreateContainerHook"]}`,
		want: &spec{file: "k.json", name: "k", endpoint: "unix:///k.sock", path: "/k.sock",
			stages: []hooks.Stage{hooks.PreCreateContainer}, policy: hooks.Ignore, timeout: hooks.DefaultTimeout, koordinator: true},
	}, {
		name:    "unknown key is named",
		file:    "x.json",
		data:    `{"endpoint": "/x.sock", "stages": ["PreCreateContainer"], "order": 1, "failure_policy": "Ignore"}`,
		wantErr: []string{`unknown field "failure_policy"`},
	}, {
		name:    "tandem key in a koordinator file",
		file:    "x.json",
		data:    `{"remote-endpoint": "/x.sock", "runtime-hooks": ["PreCreateContainer"], "order": 1}`,
		wantErr: []string{"koordinator format", `unknown field "order"`},
	}, {
		name:    "PreRemoveContainer has no RPC",
		file:    "x.json",
		data:    `{"endpoint": "/x.sock", "stages": ["PreRemoveContainer"], "order": 1}`,
		wantErr: []string{"PreRemoveContainer has no RPC"},
	}, {
		name:    "every problem at once",
		file:    "x.json",
		data:    `{"endpoint": "x.sock", "stages": ["Bogus"], "failurePolicy": "Retry", "timeout": "2"}`,
		wantErr: []string{"must be absolute", `unknown stage "Bogus"`, `failurePolicy "Retry"`, `timeout "2"`, `"order" is required`},
	}, {
		name:    "timeout out of range",
		file:    "x.json",
		data:    `{"endpoint": "/x.sock", "stages": ["PreCreateContainer"], "order": 1, "timeout": "10m"}`,
		wantErr: []string{"at most 1m0s"},
	}, {
		name:    "tcp endpoint",
		file:    "x.json",
		data:    `{"endpoint": "tcp://127.0.0.1:9000", "stages": ["PreCreateContainer"], "order": 1}`,
		wantErr: []string{"unix sockets"},
	}, {
		name:    "no stages",
		file:    "x.json",
		data:    `{"endpoint": "/x.sock", "stages": [], "order": 1}`,
		wantErr: []string{`"stages" is required`},
	}, {
		name:    "name unfit for metrics",
		file:    "x.json",
		data:    `{"name": "my hook", "endpoint": "/x.sock", "stages": ["PreCreateContainer"], "order": 1}`,
		wantErr: []string{`name "my hook"`},
	}, {
		name:    "truncated",
		file:    "x.json",
		data:    `{"endpoint": "/x.sock", "stages": ["PreCreateCont`,
		wantErr: []string{"not a JSON object"},
	}, {
		name:    "an array",
		file:    "x.json",
		data:    `[]`,
		wantErr: []string{"not a JSON object"},
	}, {
		name:    "null",
		file:    "x.json",
		data:    `null`,
		wantErr: []string{"not a JSON object"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseFile(tt.file, []byte(tt.data))
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("parsed %+v, want an error", got)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.equal(tt.want) || got.endpoint != tt.want.endpoint {
				t.Errorf("parsed %+v\nwant   %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseFile: no input makes the parser panic, and whatever it accepts is a usable registration.
// TestValidName holds validName to the regular expression it replaced, on edge cases and on random
// names over an alphabet of valid and invalid characters.
func TestValidName(t *testing.T) {
	ref := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	tests := []struct {
		name string
		want bool
	}{
		{"koordlet", true},
		{"a", true},
		{"9-x_y.z", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"-a", false},
		{".hidden", false},
		{"_a", false},
		{"a b", false},
		{"a/b", false},
		{"ä", false},
		{"a\n", false},
	}
	for _, tt := range tests {
		if got := validName(tt.name); got != tt.want || ref.MatchString(tt.name) != tt.want {
			t.Errorf("validName(%q) = %v, regexp %v; want %v", tt.name, got, ref.MatchString(tt.name), tt.want)
		}
	}
	const alphabet = "aZ09._-/ \xc3"
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(70))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if got, want := validName(string(b)), ref.MatchString(string(b)); got != want {
			t.Fatalf("validName(%q) = %v, the regular expression says %v", b, got, want)
		}
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add("a.json", `{"endpoint": "unix:///run/x.sock", "stages": ["PreCreateContainer"], "order": 500, "timeout": "1s", "failurePolicy": "Ignore"}`)
	f.Add("koordlet.json", `{"remote-endpoint": "/var/run/koordlet/koordlet.sock", "failure-policy": "Fail", "runtime-hooks": ["PreRunPodSandbox"]}`)
	f.Add("b.json", `{"name": "b", "endpoint": "/x", "stages": ["PreRemoveContainer"], "order": 1}`)
	f.Add("c.json", `{"endpoint": 5}`)
	f.Fuzz(func(t *testing.T, file, data string) {
		s, err := parseFile(file, []byte(data))
		if err != nil {
			if s != nil {
				t.Fatalf("parseFile returned both %+v and %v", s, err)
			}
			return
		}
		if !validName(s.name) {
			t.Errorf("accepted name %q", s.name)
		}
		if !filepath.IsAbs(s.path) {
			t.Errorf("accepted socket path %q", s.path)
		}
		if len(s.stages) == 0 || slices.Contains(s.stages, hooks.PreRemoveContainer) {
			t.Errorf("accepted stages %v", s.stages)
		}
		if s.policy != hooks.Fail && s.policy != hooks.Ignore {
			t.Errorf("accepted policy %q", s.policy)
		}
		if s.timeout <= 0 || s.timeout > maxTimeout {
			t.Errorf("accepted timeout %v", s.timeout)
		}
	})
}
