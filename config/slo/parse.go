package slo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/config/batchwindow"
)

// ignoredKoordinatorKeys are slo-controller-config keys Koordinator defines and Tandem does not read.
// They load with a warning instead of an error so that the operator's ConfigMap is accepted unchanged.
func ignoredKoordinatorKey(key string) bool {
	switch key {
	case "cpu-normalization-config", "resource-amplification-config":
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
// naming the key path, as does a value of the wrong type or a key written twice in one object (encoding/json
// would take the last). Keys match case-insensitively, as Koordinator's decoder does, with a warning. JSON is read as JSON: a missing comma refuses the section, as in
// Koordinator. A missing or empty section means Koordinator's defaults. A top-level key that is neither
// one of the six sections nor another Koordinator key is reported by Refused and ignored, so that a
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

// setSection copies section key from src into c; src's nil leaves c's section unset. Sections are not
// changed once parsed, so Configs may share them.
func (c *Config) setSection(key string, src *Config) {
	if s := src.sections[key]; s != nil {
		if c.sections == nil {
			c.sections = map[string]*section{}
		}
		c.sections[key] = s
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
		out.sections = maps.Clone(c.sections)
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

// decodeSection decodes one section's JSON strictly and keeps its strategies in c.
func (c *Config) decodeSection(key string, js []byte) error {
	if !isSection(key) {
		return c.unknownSection(key)
	}
	tree, err := decodeTree(key, js)
	if err != nil {
		return err
	}
	root, ok := tree.(map[string]any)
	if !ok {
		return &FieldError{Path: key, Message: "want a mapping, got " + describeJSON(tree)}
	}
	d := sectionDecoder{key: key}
	s := &section{}
	var nodes any
	if inline(key) {
		// Koordinator writes colocation-config's cluster strategy inline, beside nodeConfigs, and
		// host-application-config's applications likewise.
		nodes = root["nodeConfigs"]
		delete(root, "nodeConfigs")
		s.cluster = d.strategy(key, root)
	} else if d.check(key, root, checkStrict[struct {
		ClusterStrategy any   `json:"clusterStrategy"`
		NodeStrategies  []any `json:"nodeStrategies"`
	}]) == nil {
		if root["clusterStrategy"] != nil {
			s.cluster = d.strategy(key+".clusterStrategy", root["clusterStrategy"])
		}
		nodes = root["nodeStrategies"]
	}
	list, ok := nodes.([]any)
	if !ok && nodes != nil {
		d.errs = append(d.errs, &FieldError{Path: key + "." + nodeList(key), Message: "want a list, got " + describeJSON(nodes)})
	}
	for i, n := range list {
		path := fmt.Sprintf("%s.%s[%d]", key, nodeList(key), i)
		m, ok := n.(map[string]any)
		if !ok {
			d.errs = append(d.errs, &FieldError{Path: path, Message: "want a mapping, got " + describeJSON(n)})
			continue
		}
		profile := map[string]any{}
		for _, k := range []string{"name", "nodeSelector"} {
			if v, ok := m[k]; ok {
				profile[k] = v
				delete(m, k)
			}
		}
		if _, ok := m["applications"]; key == HostApplicationConfigKey && !ok {
			// A matching node config replaces the cluster's list whole: writing none means none.
			m["applications"] = []any{}
		}
		st := d.strategy(path, m)
		if d.check(path, profile, checkStrict[NodeProfile]) == nil {
			st.NodeProfile = decodeAs[NodeProfile](profile)
		}
		s.nodes = append(s.nodes, *st)
	}
	c.warnings = append(c.warnings, d.warnings...)
	if err := errors.Join(d.errs...); err != nil {
		return err
	}
	if c.sections == nil {
		c.sections = map[string]*section{}
	}
	c.sections[key] = s
	return nil
}

func nodeList(key string) string {
	if inline(key) {
		return "nodeConfigs"
	}
	return "nodeStrategies"
}

// inline reports whether section key writes its cluster strategy at the top, beside nodeConfigs,
// instead of under clusterStrategy beside nodeStrategies.
func inline(key string) bool {
	switch key {
	case ColocationConfigKey, HostApplicationConfigKey, BatchWindowConfigKey, DryRunConfigKey:
		return true
	}
	return false
}

func isSection(key string) bool { return slices.Contains(SectionKeys(), key) }

func (c *Config) unknownSection(key string) error {
	if ignoredKoordinatorKey(key) {
		c.warnings = append(c.warnings, fmt.Sprintf("%s: a Koordinator key Tandem does not read; ignored", key))
		return nil
	}
	return fmt.Errorf("%s: unknown section, ignored; spell it as one of %s", key, strings.Join(SectionKeys(), ", "))
}

// decodeTree reads one section's JSON as a tree of maps, lists and json.Numbers (exact for int64), and
// refuses keys written twice in one object, which encoding/json would silently resolve to the last.
func decodeTree(key string, js []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, fmt.Errorf("%s: %s", key, describeSyntaxError(js, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: unexpected text after the JSON value; remove it", key)
	}
	strict, err := sjson.UnmarshalStrict(js, new(any), sjson.DisallowDuplicateFields)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	var errs []error
	for _, e := range strict {
		errs = append(errs, &FieldError{Path: joinPath(key, fieldPath(e)), Message: "written twice in one object; keep one"})
	}
	return tree, errors.Join(errs...)
}

// sectionDecoder collects one section's errors and warnings.
type sectionDecoder struct {
	key      string
	errs     []error
	warnings []string
}

// strategy checks one strategy's keys against the section's settings type.
func (d *sectionDecoder) strategy(path string, tree any) *strategy {
	check := map[string]func(any) ([]string, error){
		ColocationConfigKey:        checkStrict[ColocationSettings],
		ResourceThresholdConfigKey: checkStrict[ResourceThresholdSettings],
		ResourceQOSConfigKey:       checkStrict[ResourceQOSSettings],
		CPUBurstConfigKey:          checkStrict[CPUBurstSettings],
		SystemConfigKey:            checkStrict[SystemSettings],
		HostApplicationConfigKey:   checkStrict[HostApplicationSettings],
		BatchWindowConfigKey:       checkStrict[batchwindow.Settings],
		DryRunConfigKey:            checkStrict[DryRunSettings],
	}[d.key]
	if err := d.check(path, tree, check); err != nil {
		return &strategy{path: path}
	}
	keys, _ := tree.(map[string]any)
	return &strategy{path: path, keys: keys}
}

// check runs one strict check and records its findings, with path put in front of their key paths.
func (d *sectionDecoder) check(path string, tree any, check func(any) ([]string, error)) error {
	warnings, err := check(tree)
	for _, w := range warnings {
		d.warnings = append(d.warnings, joinPath(path, w))
	}
	if err == nil {
		return nil
	}
	var joined interface{ Unwrap() []error }
	errs := []error{err}
	if errors.As(err, &joined) {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			msg := fe.Message
			if msg == unknownField {
				msg += "; check the spelling against Koordinator's " + d.key
			}
			e = &FieldError{Path: joinPath(path, fe.Path), Message: msg}
		}
		d.errs = append(d.errs, e)
	}
	return err
}

// checkStrict decodes tree into a T with sigs.k8s.io/json, strictly and case-sensitively, and returns its
// problems as FieldErrors whose paths are relative to tree. A key that matches a field only
// case-insensitively, as Koordinator's decoder (encoding/json) would accept it, is renamed in tree to the
// field's spelling and reported as a warning instead.
func checkStrict[T any](tree any) (warnings []string, err error) {
	js, err := json.Marshal(tree)
	if err != nil {
		return nil, err
	}
	strict, err := sjson.UnmarshalStrict(js, new(T))
	if err != nil {
		return nil, locate[T]("", tree, func(v any) any { return v })
	}
	var errs []error
	for _, e := range strict {
		path := fieldPath(e)
		if name, ok := renameFolded[T](tree, path); ok {
			warnings = append(warnings, fmt.Sprintf("%s: matched %q case-insensitively; spell it %q", path, name, name))
			continue
		}
		errs = append(errs, &FieldError{Path: path, Message: unknownField})
	}
	if len(warnings) > 0 && len(errs) == 0 {
		// The renamed keys were skipped above: check their values (and keys) now.
		more, err := checkStrict[T](tree)
		return append(warnings, more...), err
	}
	return warnings, errors.Join(errs...)
}

const unknownField = "unknown field"

// fieldPath is the key path sigs.k8s.io/json reports for a strict error.
func fieldPath(err error) string {
	var fe sjson.FieldError
	if errors.As(err, &fe) {
		return fe.FieldPath()
	}
	return err.Error()
}

// renameFolded renames the key at path (as reported by a strict error) to the field it matches
// case-insensitively, and returns the field's name; ok is false when it matches none. The field names come
// from encoding/json, which matches case-insensitively: what it decodes, written back, is spelt as the fields.
func renameFolded[T any](tree any, path string) (name string, ok bool) {
	parts := strings.Split(path, ".")
	key, parent := parts[len(parts)-1], lookup(tree, parts[:len(parts)-1])
	if parent == nil {
		return "", false
	}
	js, _ := json.Marshal(tree)
	var out T
	_ = json.Unmarshal(js, &out) // a value of the wrong type is reported after the rename
	js, _ = json.Marshal(out)
	var canon any
	_ = json.Unmarshal(js, &canon)
	for _, name := range sortedKeys(lookup(canon, parts[:len(parts)-1])) {
		if _, taken := parent[name]; strings.EqualFold(name, key) && name != key && !taken {
			parent[name] = parent[key]
			delete(parent, key)
			return name, true
		}
	}
	return "", false
}

// lookup follows a key path (keys, each with optional [i] indexes) to an object of tree; nil if there is none.
func lookup(tree any, parts []string) map[string]any {
	for _, part := range parts {
		key, indexes, _ := strings.Cut(part, "[")
		m, _ := tree.(map[string]any)
		tree = m[key]
		for idx := range strings.SplitSeq(indexes, "[") {
			i, err := strconv.Atoi(strings.TrimSuffix(idx, "]"))
			list, _ := tree.([]any)
			if idx == "" || err != nil || i >= len(list) {
				continue
			}
			tree = list[i]
		}
	}
	m, _ := tree.(map[string]any)
	return m
}

// locate finds the smallest part of tree that T refuses, so that the error names its key path: a value of
// the wrong type, or one a field's own decoder (durations, quantities) refuses. wrap puts a part back in
// place, alone, to be decoded on its own.
func locate[T any](path string, v any, wrap func(any) any) *FieldError {
	switch x := v.(type) {
	case map[string]any:
		if decodeErr[T](wrap(map[string]any{})) == nil {
			for _, k := range sortedKeys(x) {
				in := func(c any) any { return wrap(map[string]any{k: c}) }
				if decodeErr[T](in(x[k])) != nil {
					return locate[T](joinPath(path, k), x[k], in)
				}
			}
		}
	case []any:
		if decodeErr[T](wrap([]any{})) == nil {
			for i, e := range x {
				in := func(c any) any { return wrap([]any{c}) }
				if decodeErr[T](in(e)) != nil {
					return locate[T](fmt.Sprintf("%s[%d]", path, i), e, in)
				}
			}
		}
	}
	err := decodeErr[T](wrap(v))
	js, _ := json.Marshal(wrap(v))
	var te *json.UnmarshalTypeError
	if errors.As(json.Unmarshal(js, new(T)), &te) { // encoding/json's error says which type was wanted
		return &FieldError{Path: path, Message: fmt.Sprintf("want %s, got %s", wanted(te.Type, v), describeJSON(v))}
	}
	if err == nil {
		err = errors.New("cannot decode")
	}
	return &FieldError{Path: path, Message: err.Error()}
}

func decodeErr[T any](tree any) error {
	js, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	return sjson.UnmarshalCaseSensitivePreserveInts(js, new(T))
}

// decodeAs decodes a tree that checkStrict accepted.
func decodeAs[T any](tree any) T {
	var out T
	js, _ := json.Marshal(tree)
	_ = sjson.UnmarshalCaseSensitivePreserveInts(js, &out)
	return out
}

// wanted says what a JSON value for t looks like.
func wanted(t reflect.Type, got any) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if _, isNumber := got.(json.Number); isNumber {
			return "an integer that fits " + t.Kind().String()
		}
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "a mapping"
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

// joinPath appends a key path (a key or an [index] first) to a path; either may be empty.
func joinPath(path, key string) string {
	if path == "" || key == "" || strings.HasPrefix(key, "[") {
		return path + key
	}
	return path + "." + key
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
