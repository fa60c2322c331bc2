package node

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// envAssignment is one KEY=value of an environment file.
type envAssignment struct {
	key, value string
	// line is the 1-based line of the key. start is the offset of that line's first byte and
	// end that of the newline ending the assignment (or len(data)), so data[start:end] is the
	// assignment's text; an edit refuses one spanning lines.
	line       int
	start, end int
}

// parseEnvFile reads an environment file as systemd's EnvironmentFile= does (env-file.c):
// # and ; start comment lines, whitespace around the key and before the value is dropped, a
// value may be quoted with ' or " (quotes may also open mid-value), a backslash escapes the
// next character and at the end of a line continues the value on the next, and an unquoted
// value loses its trailing whitespace. Lines without = are ignored, as systemd ignores them.
// A backslash ending a comment does not continue it, as since systemd 254: before, it hid the
// next line, so an older systemd may ignore a line this reads, never the other way round.
func parseEnvFile(data []byte) []envAssignment {
	const (
		preKey = iota
		inKey
		preValue
		inValue
		valueEscape
		singleQuote
		doubleQuote
		doubleQuoteEscape
		inComment
		commentEscape
	)
	var (
		out                 []envAssignment
		key, value          strings.Builder
		state               = preKey
		line, keyLine       = 1, 0
		lineStart, keyStart = 0, 0
		trailingSpace       = -1 // where the unquoted value's trailing whitespace starts, or -1
	)
	newline := func(c byte) bool { return c == '\n' || c == '\r' }
	space := func(c byte) bool { return c == ' ' || c == '\t' }
	emit := func(end int) {
		v := value.String()
		if trailingSpace >= 0 {
			v = v[:trailingSpace]
		}
		if k := strings.TrimRight(key.String(), " \t"); k != "" {
			out = append(out, envAssignment{key: k, value: v, line: keyLine, start: keyStart, end: end})
		}
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch state {
		case preKey:
			switch {
			case c == '#' || c == ';':
				state = inComment
			case !newline(c) && !space(c):
				state = inKey
				key.Reset()
				key.WriteByte(c)
				keyLine, keyStart = line, lineStart
			}
		case inKey:
			switch {
			case newline(c):
				state = preKey
			case c == '=':
				state = preValue
				value.Reset()
				trailingSpace = -1
			default:
				key.WriteByte(c)
			}
		case preValue, inValue:
			switch {
			case newline(c):
				emit(i)
				state = preKey
			case c == '\'':
				state, trailingSpace = singleQuote, -1
			case c == '"':
				state, trailingSpace = doubleQuote, -1
			case c == '\\':
				state, trailingSpace = valueEscape, -1
			case space(c) && state == preValue:
			case space(c):
				if trailingSpace < 0 {
					trailingSpace = value.Len()
				}
				value.WriteByte(c)
			default:
				state, trailingSpace = inValue, -1
				value.WriteByte(c)
			}
		case valueEscape:
			state = inValue
			if !newline(c) {
				value.WriteByte(c)
			}
		case singleQuote:
			if c == '\'' {
				state = preValue
			} else {
				value.WriteByte(c)
			}
		case doubleQuote:
			switch c {
			case '"':
				state = preValue
			case '\\':
				state = doubleQuoteEscape
			default:
				value.WriteByte(c)
			}
		case doubleQuoteEscape:
			state = doubleQuote
			switch {
			case strings.IndexByte("\"\\`$", c) >= 0:
				value.WriteByte(c)
			case c == '\n':
			default:
				value.WriteByte('\\')
				value.WriteByte(c)
			}
		case inComment:
			if c == '\\' {
				state = commentEscape
			} else if newline(c) {
				state = preKey
			}
		case commentEscape:
			// systemd ≥ 254: a backslash no longer carries a comment onto the next line.
			if newline(c) {
				state = preKey
			} else {
				state = inComment
			}
		}
		if c == '\n' {
			line++
		}
		if newline(c) {
			lineStart = i + 1
		}
	}
	switch state {
	case preValue, inValue, valueEscape, singleQuote, doubleQuote, doubleQuoteEscape:
		emit(len(data))
	}
	return out
}

// envValue returns the value key ends up with in the parsed file (the last assignment wins),
// and whether the file sets it.
func envValue(as []envAssignment, key string) (envAssignment, bool) {
	for i := len(as) - 1; i >= 0; i-- {
		if as[i].key == key {
			return as[i], true
		}
	}
	return envAssignment{}, false
}

// The comments install puts above the KUBELET_EXTRA_ARGS line it changed. Uninstall takes out
// only what one of them says install added, so a --config-dir the operator wrote stays.
const (
	markerHead     = "# tandemctl node install "
	markerCreated  = markerHead + "created this file to give kubelet %s; tandemctl node uninstall removes it."
	markerAdded    = markerHead + "added the next line to give kubelet %s; tandemctl node uninstall removes it."
	markerAppended = markerHead + "added %s to the next line; tandemctl node uninstall removes it."
	extraArgsKey   = "KUBELET_EXTRA_ARGS"
)

// errEnvNotEditable says an environment file's KUBELET_EXTRA_ARGS is written in a way
// addEnvArg does not change, rather than risk changing what the other arguments mean.
var errEnvNotEditable = errors.New("KUBELET_EXTRA_ARGS is written in a way tandemctl does not edit")

// addEnvArg returns data with arg appended to the value of its last KUBELET_EXTRA_ARGS (the
// one systemd uses), each existing argument and the quoting kept, or with a KUBELET_EXTRA_ARGS
// line added when there is none; exists says whether the file exists at all. A marker comment
// goes above the line, for removeEnvArg. arg must be one word without quotes or backslashes.
func addEnvArg(data []byte, exists bool, arg string) ([]byte, error) {
	a, ok := envValue(parseEnvFile(data), extraArgsKey)
	if !ok {
		// At the top, where no comment continued by a backslash can swallow it, and so that
		// removing it gives back the file byte for byte, however the file ends.
		marker := markerAdded
		if !exists {
			marker = markerCreated
		}
		var out bytes.Buffer
		fmt.Fprintf(&out, marker+"\n%s=%s\n", arg, extraArgsKey, arg)
		out.Write(data)
		return out.Bytes(), nil
	}
	text := data[a.start:a.end]
	if bytes.ContainsAny(text, "\n\r") {
		return nil, fmt.Errorf("line %d: %w (it continues onto the next line)", a.line, errEnvNotEditable)
	}
	eq := bytes.IndexByte(text, '=')
	body := bytes.TrimRight(text[eq+1:], " \t")
	lead := len(body) - len(bytes.TrimLeft(body, " \t"))
	at := a.start + eq + 1 + len(body) // where the unquoted value ends
	insert := " " + arg
	switch v := body[lead:]; {
	case len(v) == 0:
		at, insert = a.start+eq+1, arg
	case v[0] == '"' || v[0] == '\'':
		if !closedAtEnd(v) {
			return nil, fmt.Errorf("line %d: %w (the quotes do not enclose the whole value)", a.line, errEnvNotEditable)
		}
		at--
		if len(v) == 2 {
			insert = arg
		}
	case bytes.ContainsAny(v, `"'`) || trailingBackslash(v):
		return nil, fmt.Errorf("line %d: %w (quotes or an escape inside an unquoted value)", a.line, errEnvNotEditable)
	}
	var out bytes.Buffer
	out.Write(data[:a.start])
	fmt.Fprintf(&out, markerAppended+"\n", arg)
	out.Write(data[a.start:at])
	out.WriteString(insert)
	out.Write(data[at:])
	return out.Bytes(), nil
}

// closedAtEnd reports whether v, which starts with a quote, is one quoted string: its only
// unescaped closing quote is its last byte.
func closedAtEnd(v []byte) bool {
	q := v[0]
	for i := 1; i < len(v); i++ {
		switch {
		case v[i] == '\\' && q == '"':
			i++
		case v[i] == q:
			return i == len(v)-1
		}
	}
	return false
}

func trailingBackslash(v []byte) bool {
	n := 0
	for i := len(v) - 1; i >= 0 && v[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// removeEnvArg undoes addEnvArg: for each marker comment it takes out the comment and what the
// marker says install added, and leaves every other byte. A line the operator has changed since
// loses only the argument; gone reports that the file held nothing but what install created,
// so it should be removed. changed is false for a file without a marker.
func removeEnvArg(data []byte) (out []byte, changed, gone bool) {
	out = data
	created := false
	for {
		m, next, end, kind, arg := findMarker(out)
		if m < 0 {
			break
		}
		changed = true
		created = created || kind == markerCreated
		line := out[next:end]
		if (kind == markerCreated || kind == markerAdded) && string(line) == extraArgsKey+"="+arg {
			if end < len(out) {
				end++ // its newline
			}
			out = cut(out, m, end)
			continue
		}
		if i := argIndex(line, arg); i >= 0 {
			from, to := next+i, next+i+len(arg)
			if i > 0 && line[i-1] == ' ' {
				from--
			}
			out = cut(out, from, to)
		}
		out = cut(out, m, next)
	}
	return out, changed, created && len(out) == 0
}

func cut(b []byte, from, to int) []byte {
	return append(append([]byte(nil), b[:from]...), b[to:]...)
}

// findMarker finds the first marker comment line in data: m is its offset, next that of the
// line below it, end that line's end; kind is the marker's format and arg what it names.
// m is -1 when there is none.
func findMarker(data []byte) (m, next, end int, kind, arg string) {
	for off := 0; off < len(data); {
		eol := bytes.IndexAny(data[off:], "\n\r")
		if eol < 0 {
			eol = len(data) - off
		}
		text := string(data[off : off+eol])
		if strings.HasPrefix(text, markerHead) && off+eol < len(data) && data[off+eol] == '\n' {
			for _, k := range []string{markerCreated, markerAdded, markerAppended} {
				var a string
				pre, post, _ := strings.Cut(k, "%s")
				if rest, ok := strings.CutPrefix(text, pre); ok {
					if a, ok = strings.CutSuffix(rest, post); ok && strings.HasPrefix(a, "--") && !strings.ContainsAny(a, " \t") {
						next = off + eol + 1
						e := bytes.IndexAny(data[next:], "\n\r")
						if e < 0 {
							e = len(data) - next
						}
						return off, next, next + e, k, a
					}
				}
			}
		}
		off += eol + 1
	}
	return -1, 0, 0, "", ""
}

// argIndex returns where arg stands in line as a word of its own (after =, a quote or a blank,
// before a quote, a blank or the end), the last such place, or -1.
func argIndex(line []byte, arg string) int {
	for i := bytes.LastIndex(line, []byte(arg)); i >= 0; i = bytes.LastIndex(line[:i], []byte(arg)) {
		before, after := byte(' '), byte(' ')
		if i > 0 {
			before = line[i-1]
		}
		if j := i + len(arg); j < len(line) {
			after = line[j]
		}
		if strings.IndexByte(" \t=\"'", before) >= 0 && strings.IndexByte(" \t\"'", after) >= 0 {
			return i
		}
	}
	return -1
}
