// Package flagfile is how every Tandem binary (tandem-proxy, tandem-nri, tandem-extender,
// tandem-webhook) reads its settings. A binary binds each setting to a field of its own settings struct
// with pflag (fs.StringVar(&cfg.Listen, "listen", ...)) and gives each a config-file key and an
// environment variable; Command.Load then resolves every field: a flag given on the command line wins,
// then its environment variable, then the config file's key, then the flag's default. Every value goes
// through the flag's own parser, so a file, a variable and the command line take the same syntax and
// fail with the same errors, which name the flag, the variable or the file and line.
//
// The config file is YAML or JSON (JSON is YAML): a mapping of keys, matched without regard to case,
// with nested mappings for a binary whose settings nest (tandem-extender's usageThresholds.cpu). A key
// the binary does not know is an error, so a misspelt key never silently leaves its default in place.
//
// Tandem does not use viper. tandem-proxy did: linking it, with its TOML, dotenv, afero, cast and
// mapstructure dependencies, made the executable 1.3 MB larger (docs/performance.md) for a job of a few
// hundred lines over pflag and sigs.k8s.io/yaml, which every Tandem binary links anyway; and its
// variables did not take the flags' syntax (it split TANDEM_POLICIES=qos,cpuset on spaces).
// tandem-extender used viper with mapstructure until it moved here too. One loader gives every binary
// one precedence, one syntax in a flag, a variable and a file, and one kind of error
// (docs/configuration.md).
package flagfile

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// Binding ties a setting to its config-file key and its environment variable.
type Binding struct {
	// Flag is the setting's name in Command.Flags or Command.Keys: a flag's name, without dashes.
	Flag string
	// Key is the config file's key for it, matched without regard to case; dots separate the keys of
	// nested mappings (usageThresholds.cpu).
	Key string
	// Env is the environment variable that sets it; empty if none.
	Env string
}

// Command is one binary's settings and where they are read from.
type Command struct {
	// Flags are the binary's flags, each bound to a field of its settings. Load adds klog's (-v, ...).
	Flags *pflag.FlagSet
	// Keys are settings that the config file and the environment set and the command line does not (a
	// nested scheduling policy), defined like flags in a set of their own that is never parsed; nil if none.
	Keys *pflag.FlagSet
	// Bindings give the settings of Flags and Keys their keys and variables; a setting without one is
	// read from the command line alone.
	Bindings []Binding
	// ConfigFlag is the flag, in Flags, that names the config file; ConfigEnv the variable naming it when
	// the flag is not given. Empty ConfigEnv: none.
	ConfigFlag, ConfigEnv string
	// Ignored are keys the file may hold for another binary sharing it; they are accepted and unused.
	Ignored []string
}

// EnvName is the environment variable of a flag or key: prefix, then name upper-cased with dashes and
// dots as underscores (TANDEM_ and state-dir give TANDEM_STATE_DIR).
func EnvName(prefix, name string) string {
	return prefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(name))
}

// Load parses args into the flags, then sets each bound setting the command line left alone from its
// environment variable or, failing that, from the config file. It returns the config file's name
// (empty if none). A parse error, pflag.ErrHelp included, is returned as pflag gives it.
func (c Command) Load(args []string, getenv func(string) string) (string, error) {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	c.Flags.AddGoFlagSet(klogFlags)
	if err := c.Flags.Parse(args); err != nil {
		return "", err
	}
	var file string
	if f := c.Flags.Lookup(c.ConfigFlag); f != nil {
		file = f.Value.String()
	}
	if file == "" && c.ConfigEnv != "" {
		file = getenv(c.ConfigEnv)
	}
	used := map[string]bool{}
	for _, k := range c.Ignored {
		used[strings.ToLower(k)] = true
	}
	for _, b := range c.Bindings {
		used[strings.ToLower(b.Key)] = true
	}
	doc, err := readFile(file, parentsOf(used))
	if err != nil {
		return "", err
	}
	for _, b := range c.Bindings {
		if err := c.resolve(b, doc, getenv); err != nil {
			return "", err
		}
	}
	if unknown := doc.unknown(used, parentsOf(used)); len(unknown) > 0 {
		known := make([]string, 0, len(c.Bindings))
		for _, b := range c.Bindings {
			known = append(known, b.Key)
		}
		return "", fmt.Errorf("%s: unknown keys %s: remove them or correct their spelling (known keys: %s)",
			file, strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return file, nil
}

// resolve sets one bound setting, unless the command line gave it: from its variable, else from the
// file, else it keeps its default.
func (c Command) resolve(b Binding, doc document, getenv func(string) string) error {
	f := c.lookup(b.Flag)
	if f == nil {
		return fmt.Errorf("a binding names %q, which is neither a flag nor a key: define it before binding it", b.Flag)
	}
	if f.Changed {
		return nil
	}
	if b.Env != "" {
		if val := getenv(b.Env); val != "" {
			if err := assign(f, val); err != nil {
				return fmt.Errorf("%s=%q: %w (it takes %s's syntax)", b.Env, val, err, c.describe(f.Name))
			}
			return nil
		}
	}
	path := strings.ToLower(b.Key)
	if val, ok := doc.get(path); ok && val != nil {
		if err := set(f, val); err != nil {
			return fmt.Errorf("%s: key %s: %w (it takes %s's values)", doc.at(path), b.Key, err, c.describe(f.Name))
		}
	}
	return nil
}

// lookup finds a setting among the flags, then the keys.
func (c Command) lookup(name string) *pflag.Flag {
	if f := c.Flags.Lookup(name); f != nil {
		return f
	}
	if c.Keys != nil {
		return c.Keys.Lookup(name)
	}
	return nil
}

// describe names a setting as a user meets it: --flag, or the key of a setting without a flag.
func (c Command) describe(name string) string {
	if c.Flags.Lookup(name) != nil {
		return "--" + name
	}
	return name
}

// parentsOf returns the mappings that dotted keys are in: usagethresholds for usagethresholds.cpu.
func parentsOf(keys map[string]bool) map[string]bool {
	parents := map[string]bool{}
	for k := range keys {
		for i := strings.LastIndexByte(k, '.'); i > 0; i = strings.LastIndexByte(k[:i], '.') {
			parents[k[:i]] = true
		}
	}
	return parents
}

// document is a config file: its name, its text (to say on which line a key is) and its keys, with
// their values as JSON decodes them (numbers kept as written). Keys are lower-cased at the top and in
// the mappings that hold settings; a mapping that is one setting's value (node labels) keeps its case.
type document struct {
	name string
	raw  []byte
	keys map[string]any
}

func readFile(name string, parents map[string]bool) (document, error) {
	if name == "" {
		return document{}, nil
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return document{}, fmt.Errorf("read config file: %w", err)
	}
	doc := document{name: name, raw: raw}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return document{}, fmt.Errorf("config file %s is neither YAML nor JSON: %w", name, err)
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return doc, nil // an empty file
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var top map[string]any
	if err := dec.Decode(&top); err != nil {
		return document{}, fmt.Errorf("config file %s: want a mapping of keys to values: %w", name, err)
	}
	if doc.keys, err = lowerKeys(top, "", parents); err != nil {
		return document{}, fmt.Errorf("config file %s: %w", name, err)
	}
	return doc, nil
}

// lowerKeys lower-cases the keys of m and of the parents in it, refusing one given twice. prefix is
// m's own lower-cased path, with a trailing dot.
func lowerKeys(m map[string]any, prefix string, parents map[string]bool) (map[string]any, error) {
	out := make(map[string]any, len(m))
	for k, v := range m {
		lk := strings.ToLower(k)
		if _, dup := out[lk]; dup {
			return nil, fmt.Errorf("key %s%s given twice (keys are matched without regard to case)", prefix, k)
		}
		if sub, ok := v.(map[string]any); ok && parents[prefix+lk] {
			low, err := lowerKeys(sub, prefix+lk+".", parents)
			if err != nil {
				return nil, err
			}
			v = low
		}
		out[lk] = v
	}
	return out, nil
}

// get returns the value at a lower-cased dotted path.
func (d document) get(path string) (any, bool) {
	var cur any = d.keys
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// unknown lists, sorted, the file's keys that are neither used nor inside one of the parents, each with
// its line.
func (d document) unknown(used, parents map[string]bool) []string {
	var out []string
	var walk func(m map[string]any, prefix string)
	walk = func(m map[string]any, prefix string) {
		for k, v := range m {
			path := prefix + k
			sub, isMap := v.(map[string]any)
			switch {
			case used[path]:
			case parents[path] && isMap:
				walk(sub, path+".")
			case parents[path]:
				out = append(out, fmt.Sprintf("%s (line %d, a mapping of keys wanted)", path, d.line(path)))
			default:
				out = append(out, fmt.Sprintf("%s (line %d)", path, d.line(path)))
			}
		}
	}
	walk(d.keys, "")
	slices.Sort(out)
	return out
}

// at says where a key is: file:line, or the file alone when the line is not found.
func (d document) at(path string) string {
	if n := d.line(path); n > 0 {
		return fmt.Sprintf("%s:%d", d.name, n)
	}
	return d.name
}

// line is the 1-based line of a lower-cased dotted key: each part is looked for, as `part:` or
// `"part":` at the start of a line's text, after the line of the part before. 0 if not found, as in a
// one-line JSON file, where the file's name alone has to do.
func (d document) line(path string) int {
	lines := strings.Split(string(d.raw), "\n")
	from := 0
	for part := range strings.SplitSeq(path, ".") {
		found := -1
		for i := from; i < len(lines); i++ {
			text := strings.ToLower(strings.TrimLeft(lines[i], " \t{,"))
			if strings.HasPrefix(text, part+":") || strings.HasPrefix(text, `"`+part+`"`) || strings.HasPrefix(text, "'"+part+"'") {
				found = i
				break
			}
		}
		if found < 0 {
			return 0
		}
		from = found + 1
	}
	return from
}

// assign gives a setting a value in its flag's syntax and marks it set, as the command line would. The
// error is the value's alone: the caller says where the value came from and which flag it is for.
func assign(f *pflag.Flag, val string) error {
	if err := f.Value.Set(val); err != nil {
		return err
	}
	f.Changed = true
	return nil
}

// set gives a setting a value from the file: scalars as the command line would, a list to a list flag,
// a mapping to a key=value flag.
func set(f *pflag.Flag, val any) error {
	switch v := val.(type) {
	case []any:
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return errors.New("a list where one value is wanted")
		}
		items := make([]string, 0, len(v))
		for _, it := range v {
			s, err := scalar(it)
			if err != nil {
				return err
			}
			items = append(items, s)
		}
		if err := sv.Replace(items); err != nil {
			return err
		}
		f.Changed = true
		return nil
	case map[string]any:
		if f.Value.Type() != "stringToString" {
			return errors.New("a mapping where one value is wanted")
		}
		if len(v) == 0 {
			return nil
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		pairs := make([]string, 0, len(v))
		for _, k := range keys {
			s, err := scalar(v[k])
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			pairs = append(pairs, k+"="+s)
		}
		// The flag parses one CSV record: quoting keeps commas inside values.
		var b strings.Builder
		w := csv.NewWriter(&b)
		if err := w.Write(pairs); err != nil {
			return err
		}
		w.Flush()
		return assign(f, strings.TrimSuffix(b.String(), "\n"))
	default:
		s, err := scalar(v)
		if err != nil {
			return err
		}
		if err := assign(f, s); err != nil {
			return fmt.Errorf("%q: %w", s, err)
		}
		return nil
	}
}

func scalar(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case json.Number:
		return s.String(), nil
	case bool:
		return strconv.FormatBool(s), nil
	default:
		return "", fmt.Errorf("want a string, a number or a boolean, got %v", v)
	}
}
