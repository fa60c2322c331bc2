// Package flagfile fills a command's flags from a config file and the environment: a flag given on the
// command line wins, then its environment variable, then the file's key, then the flag's default. Every
// value goes through the flag's own parser, so a file, a variable and the command line take the same
// syntax and fail with the same errors.
//
// tandem-proxy used viper for this. Linking it (with its TOML, dotenv, afero and cast dependencies) made
// the executable 0.6 MB larger and its resident set at rest larger with it (docs/performance.md, issue
// 19), for a job of about a hundred lines over pflag and sigs.k8s.io/yaml, which Tandem links anyway.
package flagfile

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// Binding ties a flag to its config-file key and its environment variable.
type Binding struct {
	// Flag is the flag's name, without dashes.
	Flag string
	// Key is the config file's key for it, matched without regard to case.
	Key string
	// Env is the environment variable that sets it; empty if none.
	Env string
}

// Source is where values not given on the command line come from.
type Source struct {
	// File is a YAML or JSON file of keys; empty if none.
	File string
	// Getenv reads the environment (os.Getenv in production).
	Getenv func(string) string
	// Ignored are keys the file may hold for another program sharing it; they are accepted and unused.
	Ignored []string
}

// Apply sets each bound flag that the command line left alone from its environment variable or, failing
// that, from the file. A key in the file that is neither bound nor ignored is an error: a misspelt key
// must not silently leave its default in place.
func Apply(fs *pflag.FlagSet, bindings []Binding, src Source) error {
	file, err := readFile(src.File)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, b := range bindings {
		f := fs.Lookup(b.Flag)
		if f == nil {
			return fmt.Errorf("binding for an undefined flag --%s", b.Flag)
		}
		lk := strings.ToLower(b.Key)
		used[lk] = true
		if f.Changed {
			continue
		}
		if b.Env != "" && src.Getenv != nil {
			if val := src.Getenv(b.Env); val != "" {
				if err := fs.Set(b.Flag, val); err != nil {
					return fmt.Errorf("%s=%q: %w (it takes --%s's syntax)", b.Env, val, err, b.Flag)
				}
				continue
			}
		}
		if val, ok := file[lk]; ok && val != nil {
			if err := set(fs, f, val); err != nil {
				return fmt.Errorf("%s: key %s: %w (it takes --%s's values)", src.File, b.Key, err, b.Flag)
			}
		}
	}
	for _, k := range src.Ignored {
		used[strings.ToLower(k)] = true
	}
	var unknown []string
	for k := range file {
		if !used[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		known := make([]string, 0, len(bindings))
		for _, b := range bindings {
			known = append(known, b.Key)
		}
		return fmt.Errorf("%s: unknown keys %s: remove them or correct their spelling (known keys: %s)",
			src.File, strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return nil
}

// readFile returns the file's top-level keys, lower-cased, with their values as JSON decodes them (numbers
// kept as written).
func readFile(name string) (map[string]any, error) {
	if name == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("config file %s is neither YAML nor JSON: %w", name, err)
	}
	if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		return nil, nil // an empty file
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("config file %s: want a mapping of keys to values: %w", name, err)
	}
	out := make(map[string]any, len(doc))
	for k, v := range doc {
		lk := strings.ToLower(k)
		if _, dup := out[lk]; dup {
			return nil, fmt.Errorf("config file %s: key %s given twice (keys are matched without regard to case)", name, k)
		}
		out[lk] = v
	}
	return out, nil
}

// set gives a flag a value from the file: scalars as the command line would, a list to a list flag, a
// mapping to a key=value flag.
func set(fs *pflag.FlagSet, f *pflag.Flag, val any) error {
	switch v := val.(type) {
	case string:
		return fs.Set(f.Name, v)
	case json.Number:
		return fs.Set(f.Name, v.String())
	case bool:
		return fs.Set(f.Name, strconv.FormatBool(v))
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
		return fs.Set(f.Name, strings.TrimSuffix(b.String(), "\n"))
	default:
		return fmt.Errorf("unexpected value %v", val)
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
