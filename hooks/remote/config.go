package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tandemkit/tandem/hooks"
)

// DefaultDir is where tandem-proxy looks for hook server registrations.
const DefaultDir = "/etc/tandem/hooks.d"

// koordinatorOrderBase is the first order given to Koordinator-dialect files, which have no order of
// their own: they run after Tandem's built-in hooks (100..999) and after hooks.d files that chose an
// order below it.
const koordinatorOrderBase = 10000

// maxTimeout bounds a hook's timeout: kubelet gives up on a CRI call after two minutes, and one hook
// must leave time for the others and for the runtime.
const maxTimeout = time.Minute

// FileConfig is a hooks.d file in Tandem's format:
//
//	{"name": "cpu-tuner", "endpoint": "unix:///run/cpu-tuner.sock", "stages": ["PreCreateContainer"],
//	 "failurePolicy": "Ignore", "timeout": "1s", "order": 1500}
type FileConfig struct {
	// Name keys logs and metrics; it defaults to the file name without ".json".
	Name string `json:"name,omitempty"`
	// Endpoint is the server's unix socket: unix:///path or an absolute path.
	Endpoint string `json:"endpoint"`
	// Stages are the stages to call the server at, with or without the "Hook" suffix.
	Stages []string `json:"stages"`
	// FailurePolicy is Fail (the default: kubelet gets the error) or Ignore.
	FailurePolicy string `json:"failurePolicy,omitempty"`
	// Timeout bounds each call, as a Go duration ("500ms"); it defaults to hooks.DefaultTimeout.
	Timeout string `json:"timeout,omitempty"`
	// Order places the hook among all hooks, lower first; it is required and must be unique.
	// Built-in hooks use 100..999 in steps of 100.
	Order *int `json:"order"`
}

// koordinatorConfig is a file in the format koord-runtime-proxy reads from /etc/runtime/hookserver.d,
// as koordlet writes it.
type koordinatorConfig struct {
	RemoteEndpoint string   `json:"remote-endpoint"`
	FailurePolicy  string   `json:"failure-policy"`
	RuntimeHooks   []string `json:"runtime-hooks"`
}

// spec is a validated hooks.d file.
type spec struct {
	file     string
	name     string
	endpoint string
	path     string // the socket, absolute and clean
	stages   []hooks.Stage
	policy   hooks.FailurePolicy
	timeout  time.Duration
	order    int
	// koordinator files get their order when the directory is resolved.
	koordinator bool
}

func (s *spec) equal(o *spec) bool {
	if s == nil || o == nil {
		return s == o
	}
	return s.file == o.file && s.name == o.name && s.path == o.path &&
		slices.Equal(s.stages, o.stages) && s.policy == o.policy && s.timeout == o.timeout &&
		s.order == o.order && s.koordinator == o.koordinator
}

// validName reports whether name is a hook name: a letter or digit, then up to 62 letters, digits, dots,
// underscores or dashes. Written out rather than as a regular expression: the `{0,62}` repetition
// compiles to 62 nested alternatives, which took 1.2 ms and 848 allocations at every tandem-proxy's start
// (GODEBUG=inittrace=1), to check a name only when hooks.d is read.
func validName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// parseFile reads one hooks.d file; file is its base name. The format is told by its keys: a file with
// any of Koordinator's keys is read as Koordinator's, any other as Tandem's. Unknown keys are errors,
// so a misspelt "failurePolicy" does not silently become the default.
func parseFile(file string, data []byte) (*spec, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(data, &keys); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if keys == nil {
		return nil, errors.New("not a JSON object: null")
	}
	koordinator := false
	for k := range keys {
		if k == "remote-endpoint" || k == "failure-policy" || k == "runtime-hooks" {
			koordinator = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	name := strings.TrimSuffix(file, ".json")
	if koordinator {
		var kc koordinatorConfig
		if err := dec.Decode(&kc); err != nil {
			return nil, fmt.Errorf("koordinator format (it has remote-endpoint, failure-policy or runtime-hooks): %w", err)
		}
		return koordinatorSpec(file, name, kc)
	}
	var fc FileConfig
	if err := dec.Decode(&fc); err != nil {
		return nil, err
	}
	if fc.Name != "" {
		name = fc.Name
	}
	return tandemSpec(file, name, fc)
}

func tandemSpec(file, name string, fc FileConfig) (*spec, error) {
	s := &spec{file: file, name: name, endpoint: fc.Endpoint, timeout: hooks.DefaultTimeout}
	var errs []error
	if !validName(name) {
		errs = append(errs, fmt.Errorf("name %q: use 1-63 letters, digits, '.', '_' or '-' (set \"name\" or rename the file)", name))
	}
	if fc.Endpoint == "" {
		errs = append(errs, errors.New(`"endpoint" is required: the hook server's unix socket, as in unix:///run/my-hook.sock`))
	} else if t, err := endpointPath(fc.Endpoint); err != nil {
		errs = append(errs, err)
	} else {
		s.path = t
	}
	var err error
	if s.stages, err = parseStages("stages", fc.Stages, false); err != nil {
		errs = append(errs, err)
	}
	switch p := hooks.FailurePolicy(fc.FailurePolicy); p {
	case "":
		s.policy = hooks.Fail
	case hooks.Fail, hooks.Ignore:
		s.policy = p
	default:
		errs = append(errs, fmt.Errorf("failurePolicy %q: want Fail or Ignore", fc.FailurePolicy))
	}
	if fc.Timeout != "" {
		d, err := time.ParseDuration(fc.Timeout)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("timeout %q: want a duration such as \"500ms\" or \"2s\"", fc.Timeout))
		case d <= 0 || d > maxTimeout:
			errs = append(errs, fmt.Errorf("timeout %v: want more than 0 and at most %v", d, maxTimeout))
		default:
			s.timeout = d
		}
	}
	if fc.Order == nil {
		errs = append(errs, errors.New(`"order" is required: built-in hooks use 100..999 in steps of 100, so pick another number (lower runs first)`))
	} else {
		s.order = *fc.Order
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func koordinatorSpec(file, name string, kc koordinatorConfig) (*spec, error) {
	s := &spec{file: file, name: name, endpoint: kc.RemoteEndpoint, timeout: hooks.DefaultTimeout, koordinator: true}
	var errs []error
	if !validName(name) {
		errs = append(errs, fmt.Errorf("hook name %q from the file name: rename the file to 1-63 letters, digits, '.', '_' or '-'", name))
	}
	if kc.RemoteEndpoint == "" {
		errs = append(errs, errors.New(`"remote-endpoint" is required: the hook server's unix socket path`))
	} else if t, err := endpointPath(kc.RemoteEndpoint); err != nil {
		errs = append(errs, err)
	} else {
		s.path = t
	}
	var err error
	if s.stages, err = parseStages("runtime-hooks", kc.RuntimeHooks, true); err != nil {
		errs = append(errs, err)
	}
	switch kc.FailurePolicy {
	case "":
		// koord-runtime-proxy ignores the errors of a server without a policy.
		s.policy = hooks.Ignore
	case string(hooks.Fail), string(hooks.Ignore):
		s.policy = hooks.FailurePolicy(kc.FailurePolicy)
	default:
		errs = append(errs, fmt.Errorf("failure-policy %q: want Fail or Ignore", kc.FailurePolicy))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// parseStages reads stage names in lifecycle order, without duplicates.
func parseStages(key string, names []string, koordinator bool) ([]hooks.Stage, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%q is required: list the stages to call the server at, such as [\"PreCreateContainer\"]", key)
	}
	set := map[hooks.Stage]bool{}
	var errs []error
	for _, n := range names {
		// Koordinator defines these names but koord-runtime-proxy never calls them; its files may list them.
		if koordinator && (n == "PreRemoveRunPodSandbox" || n == "NoneRuntimeHookType") {
			continue
		}
		st, err := hooks.ParseStage(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		if st == hooks.PreRemoveContainer || st == hooks.PostRemoveContainer {
			errs = append(errs, fmt.Errorf("%s: %s has no RPC in the runtime hook protocol, so a hook server cannot take part in it; write an in-process hook for it", key, st))
			continue
		}
		set[st] = true
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var out []hooks.Stage
	for _, st := range hooks.Stages() {
		if set[st] {
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%q lists no stage Tandem calls hook servers at", key)
	}
	return out, nil
}
