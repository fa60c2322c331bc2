package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// request is a decoded extenderv1.ExtenderArgs. Exactly one of names and nodes is set.
type request struct {
	pod   *corev1.Pod
	names []string
	nodes *corev1.NodeList
}

// decodeRequest reads ExtenderArgs as kube-scheduler writes them: encoding/json of the Go struct,
// so the keys are "Pod", "Nodes" and "NodeNames". Keys match case-insensitively, as in
// encoding/json, which also accepts the lower-cased spelling of hand-written clients.
//
// A 5000-name request is mostly node names, and encoding/json allocates a string per name. The
// fast path below reads the top level and the name array itself, with one allocation for all
// names, and hands the Pod and Nodes values to encoding/json. Whenever the body has anything the
// fast path does not expect (escapes, non-ASCII names, odd structure, invalid JSON) it decodes
// the whole body with encoding/json into extenderv1.ExtenderArgs instead, so both paths accept
// and reject exactly the same bodies; FuzzDecodeArgs checks that.
func decodeRequest(body []byte) (*request, error) {
	req, ok := decodeFast(body)
	if !ok {
		var args extenderv1.ExtenderArgs
		if err := json.Unmarshal(body, &args); err != nil {
			return nil, fmt.Errorf("%w: body is not ExtenderArgs JSON: %w", errRequest, err)
		}
		req = &request{pod: args.Pod, nodes: args.Nodes}
		if args.NodeNames != nil {
			req.names = *args.NodeNames
			if req.names == nil {
				req.names = []string{}
			}
		}
	}
	if req.pod == nil {
		return nil, fmt.Errorf("%w: Pod is missing", errRequest)
	}
	if req.names == nil && req.nodes == nil {
		return nil, fmt.Errorf("%w: both NodeNames and Nodes are missing", errRequest)
	}
	if req.names != nil && req.nodes != nil {
		// kube-scheduler sends one or the other, depending on nodeCacheCapable.
		return nil, fmt.Errorf("%w: both NodeNames and Nodes are set", errRequest)
	}
	return req, nil
}

// decodeFast decodes body or reports that decodeRequest must use encoding/json.
func decodeFast(body []byte) (*request, bool) {
	var req request
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return &req, skipSpace(body, i+1) == len(body)
	}
	for {
		key, next, ok := plainString(body, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return nil, false
		}
		start := skipSpace(body, i+1)
		end, ok := skipValue(body, start)
		if !ok {
			return nil, false
		}
		value := body[start:end]
		switch {
		case strings.EqualFold(key, "Pod"):
			// Into the same pointer, as encoding/json does with a repeated key.
			if json.Unmarshal(value, &req.pod) != nil {
				return nil, false
			}
		case strings.EqualFold(key, "Nodes"):
			if json.Unmarshal(value, &req.nodes) != nil {
				return nil, false
			}
		case strings.EqualFold(key, "NodeNames"):
			if req.names, ok = plainStrings(value); !ok {
				return nil, false
			}
		default:
			if !json.Valid(value) {
				return nil, false
			}
		}
		i = skipSpace(body, end)
		if i >= len(body) {
			return nil, false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return &req, skipSpace(body, i+1) == len(body)
		default:
			return nil, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// plainChar is a byte that a JSON string holds as itself and that no name needs to escape.
func plainChar(c byte) bool { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' }

// plainString reads a string of plain characters at b[i].
func plainString(b []byte, i int) (s string, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", 0, false
	}
	j := i + 1
	for j < len(b) && plainChar(b[j]) {
		j++
	}
	if j >= len(b) || b[j] != '"' {
		return "", 0, false
	}
	return string(b[i+1 : j]), j + 1, true
}

// plainStrings reads null or an array of plain strings. All names share one allocation.
func plainStrings(v []byte) ([]string, bool) {
	if string(v) == "null" {
		return nil, true
	}
	if len(v) < 2 || v[0] != '[' {
		return nil, false
	}
	all := string(v)
	n := bytes.Count(v, []byte{','}) + 1
	names := make([]string, 0, n)
	i := skipSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		return names, i+1 == len(v)
	}
	for {
		if i >= len(v) || v[i] != '"' {
			return nil, false
		}
		j := i + 1
		for j < len(v) && plainChar(v[j]) {
			j++
		}
		if j >= len(v) || v[j] != '"' {
			return nil, false
		}
		names = append(names, all[i+1:j])
		i = skipSpace(v, j+1)
		if i >= len(v) {
			return nil, false
		}
		switch v[i] {
		case ',':
			i = skipSpace(v, i+1)
		case ']':
			return names, i+1 == len(v)
		default:
			return nil, false
		}
	}
}

// skipValue finds the end of the JSON value at b[i] by matching brackets and strings. It does not
// validate; the caller hands the value to encoding/json, which does.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	case '"':
		return skipString(b, i)
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\r' && b[j] != '\t' {
			j++
		}
		return j, j > i
	}
}

func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// The encoders below write what encoding/json writes for extenderv1.ExtenderFilterResult and
// HostPriorityList, without reflection or a map per request. Tests decode their output into the
// extenderv1 types.

type rejection struct {
	name   string
	reason Reason
}

func appendFilterResult(out []byte, passed []string, rejected []rejection) []byte {
	out = append(out, `{"Nodes":null,"NodeNames":[`...)
	for i, n := range passed {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendString(out, n)
	}
	out = append(out, `],"FailedNodes":`...)
	out = appendFailed(out, rejected, true)
	out = append(out, `,"FailedAndUnresolvableNodes":`...)
	out = appendFailed(out, rejected, false)
	return append(out, `,"Error":""}`...)
}

func appendFailed(out []byte, rejected []rejection, resolvable bool) []byte {
	out = append(out, '{')
	first := true
	for _, r := range rejected {
		if r.reason.resolvable() != resolvable {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = appendString(out, r.name)
		out = append(out, ':')
		out = appendString(out, r.reason.message())
	}
	return append(out, '}')
}

func appendPriorities(out []byte, names []string, scores []int64) []byte {
	out = append(out, '[')
	for i, n := range names {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"Host":`...)
		out = appendString(out, n)
		out = append(out, `,"Score":`...)
		out = strconv.AppendInt(out, scores[i], 10)
		out = append(out, '}')
	}
	return append(out, ']')
}

// appendString quotes s as JSON. Node names are plain ASCII; anything else goes through
// encoding/json so that the escaping is exactly its own.
func appendString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plainChar(s[i]) {
			b, _ := json.Marshal(s) // a string always marshals
			return append(out, b...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}
