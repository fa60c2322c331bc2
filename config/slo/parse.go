package slo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// ignoredKoordinatorKeys are slo-controller-config keys Koordinator defines and Tandem does not read.
// They load with a warning instead of an error so that the operator's ConfigMap is accepted unchanged.
func ignoredKoordinatorKey(key string) bool {
	switch key {
	case "host-application-config", "cpu-normalization-config", "resource-amplification-config":
		return true
	}
	return false
}

// Parse reads the data of a slo-controller-config ConfigMap: each value is the JSON text of one section.
//
// Each section is decoded and validated on its own. A section that does not parse or validate is refused:
// it is left unset in the result (so it resolves to Koordinator's defaults unless the caller keeps its last
// good value, see KeepLastGood) and reported by Refused with the error naming the key, and for syntax errors
// the line and column. The other sections apply. This is how Koordinator's slo-controller treats the same
// ConfigMap, so the same object means the same thing to both.
//
// Decoding is strict: a key that is not a field of its section (an operator's typo) refuses the section,
// naming the key path, as does a value of the wrong type. Keys match case-insensitively, as Koordinator's
// decoder does, with a warning. JSON is read as JSON: a missing comma refuses the section, as in
// Koordinator. A missing or empty section means Koordinator's defaults. A top-level key that is neither
// one of the five sections nor another Koordinator key is reported by Refused and ignored, so that a
// misspelt section name cannot silently fall back to defaults unnoticed.
func Parse(data map[string]string) *Config {
	cfg := &Config{}
	for _, key := range sortedKeys(data) {
		one := &Config{}
		err := one.decodeText(key, []byte(data[key]))
		cfg.take(key, one, err)
	}
	return cfg
}

// take moves section key of one into c once it validates, or records why it was refused.
func (c *Config) take(key string, one *Config, err error) {
	c.warnings = append(c.warnings, one.warnings...)
	if err == nil {
		err = one.Validate()
	}
	if err != nil {
		c.refused = append(c.refused, SectionError{Key: key, Err: err})
		return
	}
	c.setSection(key, one)
}

// setSection copies section key from src into c; src's nil leaves c's section unset.
func (c *Config) setSection(key string, src *Config) {
	switch key {
	case ColocationConfigKey:
		c.Colocation = src.Colocation
	case ResourceThresholdConfigKey:
		c.ResourceThreshold = src.ResourceThreshold
	case ResourceQOSConfigKey:
		c.ResourceQOS = src.ResourceQOS
	case CPUBurstConfigKey:
		c.CPUBurst = src.CPUBurst
	case SystemConfigKey:
		c.System = src.System
	}
}

// KeepLastGood returns c with every refused section replaced by last's value of it, so that a typo keeps
// the settings in force instead of falling back to defaults. last is the configuration in force before
// (nil at a first start: a refused section then means defaults). Sections c does not mention stay unset:
// a key the operator removed means Koordinator's defaults, as in Koordinator. c is not modified.
func (c *Config) KeepLastGood(last *Config) *Config {
	out := &Config{}
	if c != nil {
		*out = *c
		out.warnings = slices.Clone(c.warnings)
		out.refused = slices.Clone(c.refused)
	}
	if last == nil {
		return out
	}
	for _, r := range out.refused {
		if isSection(r.Key) {
			out.setSection(r.Key, last)
		}
	}
	return out
}

// ParseFile reads the same content from one YAML or JSON document, so that a Tandem config file can embed
// it or an operator can point Tandem at their ConfigMap manifest. The document is either a ConfigMap
// (kind: ConfigMap; its data is read as by Parse) or a mapping whose keys are section names and whose
// values are either the section's JSON text (a string) or the section itself (a nested object).
//
// Sections are read as by Parse: a bad one is refused (see Refused) and the others apply. The error is
// only for a document that is not YAML or not a mapping at all, where no section can be told from another.
func ParseFile(raw []byte) (*Config, error) {
	js, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		return nil, fmt.Errorf("read slo config: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		return nil, fmt.Errorf("read slo config: the document must be a mapping of section names: %w", err)
	}
	if isConfigMap(top) {
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := json.Unmarshal(js, &cm); err != nil {
			return nil, fmt.Errorf("read slo config: ConfigMap data must map keys to strings: %w", err)
		}
		return Parse(cm.Data), nil
	}

	cfg := &Config{}
	for _, key := range sortedKeys(top) {
		val := bytes.TrimSpace(top[key])
		one := &Config{}
		var err error
		switch {
		case len(val) == 0 || string(val) == "null":
			// An empty key means the section is absent, as in a ConfigMap.
			continue
		case val[0] == '"':
			var text string
			if err = json.Unmarshal(val, &text); err != nil {
				err = fmt.Errorf("%s: %w", key, err)
				break
			}
			err = one.decodeText(key, []byte(text))
		case val[0] == '{':
			err = one.decodeSection(key, val)
		default:
			err = fmt.Errorf("%s: want the section as a JSON string or a mapping, got %s", key, abbreviate(val))
		}
		cfg.take(key, one, err)
	}
	return cfg, nil
}

func isConfigMap(top map[string]json.RawMessage) bool {
	var kind string
	if err := json.Unmarshal(top["kind"], &kind); err != nil {
		return false
	}
	return kind == "ConfigMap"
}

// decodeText decodes one section given as JSON text, as stored in a ConfigMap value.
func (c *Config) decodeText(key string, text []byte) error {
	if !isSection(key) {
		return c.unknownSection(key)
	}
	if len(bytes.TrimSpace(text)) == 0 {
		c.warnings = append(c.warnings, fmt.Sprintf("%s: empty; using Koordinator's defaults", key))
		return nil
	}
	return c.decodeSection(key, text)
}

// decodeSection decodes one section's JSON strictly into its field of c.
func (c *Config) decodeSection(key string, js []byte) error {
	var err error
	switch key {
	case ColocationConfigKey:
		c.Colocation = &ColocationConfig{}
		err = c.decodeStrict(key, js, c.Colocation)
	case ResourceThresholdConfigKey:
		c.ResourceThreshold = &ResourceThresholdConfig{}
		err = c.decodeStrict(key, js, c.ResourceThreshold)
	case ResourceQOSConfigKey:
		c.ResourceQOS = &ResourceQOSConfig{}
		err = c.decodeStrict(key, js, c.ResourceQOS)
	case CPUBurstConfigKey:
		c.CPUBurst = &CPUBurstConfig{}
		err = c.decodeStrict(key, js, c.CPUBurst)
	case SystemConfigKey:
		c.System = &SystemConfig{}
		err = c.decodeStrict(key, js, c.System)
	default:
		err = c.unknownSection(key)
	}
	return err
}

func isSection(key string) bool { return slices.Contains(SectionKeys(), key) }

func (c *Config) unknownSection(key string) error {
	if ignoredKoordinatorKey(key) {
		c.warnings = append(c.warnings, fmt.Sprintf("%s: a Koordinator key Tandem does not read; ignored", key))
		return nil
	}
	return fmt.Errorf("%s: unknown section, ignored; spell it as one of %s", key, strings.Join(SectionKeys(), ", "))
}

// decodeStrict checks js against out's type (unknown keys, types, values of custom types, each reported
// with its full path), then decodes it.
func (c *Config) decodeStrict(section string, js []byte, out any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return fmt.Errorf("%s: %s", section, describeSyntaxError(js, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%s: unexpected text after the JSON value; remove it", section)
	}
	k := keyChecker{}
	k.check(section, generic, reflect.TypeOf(out).Elem())
	c.warnings = append(c.warnings, k.warnings...)
	if err := errors.Join(k.errs...); err != nil {
		return err
	}
	// The checker has seen every key and value, so this decode is expected to succeed; the error path is a
	// backstop that still names the section.
	strict := json.NewDecoder(bytes.NewReader(js))
	strict.DisallowUnknownFields()
	if err := strict.Decode(out); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fmt.Errorf("%s.%s: cannot use JSON %s as %s", section, te.Field, te.Value, te.Type)
		}
		return fmt.Errorf("%s: %w", section, err)
	}
	return nil
}

// describeSyntaxError adds the line and column, since ConfigMap values are multi-line JSON.
func describeSyntaxError(js []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(js, int(se.Offset))
		return fmt.Sprintf("line %d, column %d: %v; fix the JSON", line, col, se)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "the JSON ends early; close every { and ["
	}
	return err.Error()
}

// position turns a byte offset (as reported by encoding/json: bytes read so far) into 1-based line and column.
func position(js []byte, offset int) (line, col int) {
	if len(js) == 0 {
		return 1, 1
	}
	offset = min(max(offset, 1), len(js))
	before := js[:offset-1]
	line = bytes.Count(before, []byte("\n")) + 1
	col = offset - bytes.LastIndexByte(before, '\n') - 1
	return line, col
}

func abbreviate(b []byte) string {
	const n = 40
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// keyChecker walks a decoded JSON value beside the Go type it will be decoded into and records, with the
// full key path, every key the type does not have and every value of the wrong kind. encoding/json reports
// an unknown key without its path and stops at the first problem; an operator wants all of them, located.
type keyChecker struct {
	errs     []error
	warnings []string
}

func (k *keyChecker) fail(path, format string, args ...any) {
	k.errs = append(k.errs, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (k *keyChecker) check(path string, v any, t reflect.Type) {
	if v == nil { // JSON null leaves the field unset
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		// Custom types (durations, quantities, int-or-string) validate themselves; run them here so that
		// their errors carry the path.
		raw, err := json.Marshal(v)
		if err == nil {
			err = reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw)
		}
		if err != nil {
			k.fail(path, "%v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			k.fail(path, "want a mapping, got %s", describeJSON(v))
			return
		}
		fields := jsonFields(t)
		for _, key := range sortedKeys(obj) {
			ft, ok := fields[key]
			if !ok {
				name, folded := foldedField(fields, key)
				if !folded {
					k.fail(joinPath(path, key), "unknown field; check the spelling against Koordinator's %s", sectionOf(path))
					continue
				}
				k.warnings = append(k.warnings, fmt.Sprintf("%s: matched %q case-insensitively; spell it %q", joinPath(path, key), name, name))
				ft = fields[name]
			}
			k.check(joinPath(path, key), obj[key], ft)
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			k.fail(path, "want a mapping, got %s", describeJSON(v))
			return
		}
		for _, key := range sortedKeys(obj) {
			k.check(joinPath(path, key), obj[key], t.Elem())
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			k.fail(path, "want a list, got %s", describeJSON(v))
			return
		}
		for i, e := range arr {
			k.check(fmt.Sprintf("%s[%d]", path, i), e, t.Elem())
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			k.fail(path, "want true or false, got %s", describeJSON(v))
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			k.fail(path, "want a string, got %s", describeJSON(v))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			k.fail(path, "want an integer, got %s", describeJSON(v))
			return
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); err != nil {
			k.fail(path, "want an integer that fits %s, got %s", t.Kind(), n)
		}
	case reflect.Float32, reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			k.fail(path, "want a number, got %s", describeJSON(v))
			return
		}
		if _, err := strconv.ParseFloat(n.String(), t.Bits()); err != nil {
			k.fail(path, "want a number that fits %s, got %s", t.Kind(), n)
		}
	}
}

// jsonFields maps each JSON key of struct type t to its field type, promoting the fields of untagged
// embedded structs as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for n, typ := range jsonFields(ft) {
					if _, taken := fields[n]; !taken {
						fields[n] = typ
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// foldedField finds the field a key matches case-insensitively, the way encoding/json falls back.
func foldedField(fields map[string]reflect.Type, key string) (string, bool) {
	for _, name := range sortedKeys(fields) {
		if strings.EqualFold(name, key) {
			return name, true
		}
	}
	return "", false
}

func joinPath(path, key string) string { return path + "." + key }

// sectionOf returns the section key a path starts with, for messages.
func sectionOf(path string) string {
	section, _, _ := strings.Cut(path, ".")
	return section
}

func describeJSON(v any) string {
	switch x := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		return strconv.Quote(abbreviate([]byte(x)))
	case json.Number:
		return x.String()
	default:
		return fmt.Sprint(x)
	}
}
