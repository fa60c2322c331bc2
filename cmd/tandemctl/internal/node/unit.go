package node

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"
)

// Unit returns the unit template with its ExecStart rewritten: the binary at bin, every flag of
// o.flags() set to its value (or left out when empty; added at the end when the template lacks
// it), then o.ProxyArgs. The rest of the template is kept byte for byte. ExecStart stays one
// word per line with backslash continuations and no quoting, so a plain reader of units (as
// e2e/cluster's ExecStart) reads it; a value needing quoting is refused.
func Unit(tmpl []byte, bin string, o Options) ([]byte, error) {
	var before, after bytes.Buffer
	var exec []string
	state := 0 // 0 before ExecStart, 1 inside it, 2 after
	sc := bufio.NewScanner(bytes.NewReader(tmpl))
	for sc.Scan() {
		line := sc.Text()
		switch state {
		case 0:
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart=")
			if !ok {
				before.WriteString(line + "\n")
				continue
			}
			line, state = rest, 1
			fallthrough
		case 1:
			t := strings.TrimSpace(line)
			exec = append(exec, strings.Fields(strings.TrimSuffix(t, `\`))...)
			if !strings.HasSuffix(t, `\`) {
				state = 2
			}
		case 2:
			after.WriteString(line + "\n")
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read unit template: %w", err)
	}
	if len(exec) == 0 {
		return nil, fmt.Errorf("unit template has no ExecStart=")
	}

	args := exec[1:]
	set := func(name, value string) {
		i := -1
		for j, a := range args {
			if n, _, _ := strings.Cut(a, "="); n == name {
				i = j
				break
			}
		}
		switch {
		case value == "" && i >= 0:
			args = append(args[:i], args[i+1:]...)
		case value == "":
		case i >= 0:
			args[i] = name + "=" + value
		default:
			args = append(args, name+"="+value)
		}
	}
	for _, f := range o.flags() {
		if err := checkWord(f[0], f[1]); err != nil {
			return nil, err
		}
		set(f[0], f[1])
	}
	for _, a := range o.ProxyArgs {
		name, value, ok := strings.Cut(a, "=")
		if !ok || !strings.HasPrefix(name, "-") {
			return nil, fmt.Errorf("proxy argument %q: write it as --flag=value", a)
		}
		if err := checkWord(name, value); err != nil {
			return nil, err
		}
		set(name, value)
	}
	if err := checkWord("binary path", bin); err != nil {
		return nil, err
	}

	var out bytes.Buffer
	out.Write(before.Bytes())
	out.WriteString("ExecStart=" + bin)
	for _, a := range args {
		out.WriteString(" \\\n  " + a)
	}
	out.WriteString("\n")
	out.Write(after.Bytes())
	return out.Bytes(), nil
}

// checkWord refuses what systemd would not pass through as one literal word: whitespace and
// quotes split or group words, a backslash escapes, % starts a specifier and $ a variable.
func checkWord(name, value string) error {
	if i := strings.IndexAny(value, " \t\n\"'\\%$;"); i >= 0 {
		return fmt.Errorf("%s %q: %q cannot stand in a systemd ExecStart word unquoted; choose a value without it", name, value, value[i])
	}
	return nil
}
