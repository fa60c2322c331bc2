package extender

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// request is a decoded extenderv1.ExtenderArgs. Exactly one of names and nodes is non-nil.
type request struct {
	pod   *corev1.Pod
	names []string
	// nodes are the Node objects of a request without nodeCacheCapable, each as its JSON within
	// the body: a node is decoded on its own when it is judged (eachNode), and a passing node is
	// answered with the bytes kube-scheduler sent, so at most one decoded Node is alive at a time.
	nodes [][]byte
}

// Limits on what one request may decode to, whatever its size in bytes: encoding/json turns the
// three bytes `{},` into a 768-byte Node or a 408-byte Container, so one MiB of them costs a GiB
// (measured: decoding, judging and answering 1 MiB of `{},` Node objects took the handler's peak
// RSS from 30 MiB to 1078 MiB). They are far above what kube-scheduler sends.
const (
	// maxNodesPerRequest bounds NodeNames and Nodes.items: ten times the 5000 nodes Kubernetes
	// supports in one cluster.
	maxNodesPerRequest = 50000
	// maxObjectValues bounds the JSON values (array elements and object members, at any depth) of
	// the Pod and of each Node. A node as kubelet reports it, with 50 images and its
	// managedFields, holds about 500 in 16 KB (TestFullNodesOf5000PassTheDefaultLimit); a 20-container
	// pod, a few thousand.
	maxObjectValues = 20000
	// maxObjectBytes bounds the JSON of the Pod and of each Node: kube-apiserver takes at most
	// 3 MiB for an object, and etcd stores at most 1.5 MiB of it.
	maxObjectBytes = 8 << 20
	// maxNodeNameLength is the longest name a Node can have (a DNS subdomain). Names are kept
	// and answered for every node of a request, so they must not be the size of the body.
	maxNodeNameLength = 253
)

// decodeLimits are the limits above, as a value so that tests can make them small.
type decodeLimits struct {
	nodes, values, objectBytes int
}

func defaultDecodeLimits() decodeLimits {
	return decodeLimits{nodes: maxNodesPerRequest, values: maxObjectValues, objectBytes: maxObjectBytes}
}

// namesBytes bounds the JSON of NodeNames: the most names, each of the longest name, quoted,
// with commas.
func (l decodeLimits) namesBytes() int { return l.nodes * (maxNodeNameLength + 3) }

// errTooLarge is a request whose decoded form would pass a limit above; it becomes HTTP 413.
var errTooLarge = errors.New("request too large to decode")

// errNodesTwice refuses what encoding/json would merge element by element into one node list.
var errNodesTwice = fmt.Errorf("%w: Nodes or Nodes.items is given twice", errRequest)

// decodeRequest reads ExtenderArgs as kube-scheduler writes them: encoding/json of the Go struct,
// so the keys are "Pod", "Nodes" and "NodeNames". Keys match case-insensitively, as in
// encoding/json, which also accepts the lower-cased spelling of hand-written clients.
//
// It walks the top level itself, checks each value against the limits above before anything is
// allocated for it, and hands the Pod and the parts of Nodes to encoding/json. A 5000-name request
// is mostly node names, and encoding/json allocates a string per name, so plain names are read
// here with one allocation for all of them. A body is accepted exactly when encoding/json accepts
// it into extenderv1.ExtenderArgs, with the values encoding/json decodes, except for bodies past
// the limits (errTooLarge) and a Nodes key given twice; FuzzDecodeArgs checks that.
func decodeRequest(body []byte, lim decodeLimits) (*request, error) {
	var (
		req                 request
		podValues, podBytes int
		haveNodes           bool
	)
	err := eachMember(body, func(key string, value []byte) error {
		switch {
		case strings.EqualFold(key, "Pod"):
			// Into the same pointer, as encoding/json does with a repeated key; so the limits
			// count every occurrence.
			podValues += countValues(value)
			podBytes += len(value)
			if err := lim.object("the Pod", podValues, podBytes); err != nil {
				return err
			}
			return json.Unmarshal(value, &req.pod)
		case strings.EqualFold(key, "Nodes"):
			if haveNodes {
				return errNodesTwice
			}
			haveNodes = true
			var err error
			req.nodes, err = nodeObjects(value, lim)
			return err
		case strings.EqualFold(key, "NodeNames"):
			var err error
			req.names, err = nodeNames(value, lim)
			return err
		default:
			if !json.Valid(value) {
				return fmt.Errorf("invalid JSON in %q", key)
			}
			return nil
		}
	})
	if errors.Is(err, errTooLarge) || errors.Is(err, errRequest) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: body is not ExtenderArgs JSON: %w", errRequest, err)
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
	return &req, nil
}

// object checks what decoding one object would allocate.
func (l decodeLimits) object(what string, values, size int) error {
	if values > l.values {
		return fmt.Errorf("%w: %s holds more than %d JSON values; no object kube-apiserver stores comes close", errTooLarge, what, l.values)
	}
	if size > l.objectBytes {
		return fmt.Errorf("%w: %s is larger than %d bytes; no object kube-apiserver stores comes close", errTooLarge, what, l.objectBytes)
	}
	return nil
}

func (l decodeLimits) checkNodes(n int) error {
	if n > l.nodes {
		return fmt.Errorf("%w: %d nodes in one request, more than %d", errTooLarge, n, l.nodes)
	}
	return nil
}

// eachMember calls fn with each member of the JSON object body, its key unescaped, and reports
// invalid JSON around the values; fn checks the values. null is an object without members, as
// for encoding/json decoding into a struct.
func eachMember(body []byte, fn func(key string, value []byte) error) error {
	i := skipSpace(body, 0)
	if string(bytes.TrimRight(body[i:], " \t\r\n")) == "null" {
		return nil
	}
	if i >= len(body) || body[i] != '{' {
		return errors.New("not a JSON object")
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return trailing(body, i+1)
	}
	for {
		key, next, ok := plainString(body, i)
		if !ok {
			// Escapes or non-ASCII: encoding/json unescapes the key before matching it.
			end, found := 0, i < len(body) && body[i] == '"'
			if found {
				end, found = skipString(body, i)
			}
			if !found {
				return errors.New("want a quoted key")
			}
			if err := json.Unmarshal(body[i:end], &key); err != nil {
				return err
			}
			next = end
		}
		i = skipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return errors.New("want ':' after a key")
		}
		start := skipSpace(body, i+1)
		end, ok := skipValue(body, start)
		if !ok {
			return errors.New("truncated value")
		}
		if err := fn(key, body[start:end]); err != nil {
			return err
		}
		i = skipSpace(body, end)
		if i >= len(body) {
			return errors.New("unterminated object")
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return trailing(body, i+1)
		default:
			return errors.New("want ',' or '}' after a value")
		}
	}
}

func trailing(body []byte, i int) error {
	if skipSpace(body, i) != len(body) {
		return errors.New("data after the object")
	}
	return nil
}

// nodeNames decodes NodeNames: null or an array of strings.
func nodeNames(v []byte, lim decodeLimits) ([]string, error) {
	if len(v) > lim.namesBytes() {
		return nil, fmt.Errorf("%w: NodeNames is larger than %d bytes, %d names of the longest a node name can be", errTooLarge, lim.namesBytes(), lim.nodes)
	}
	n := countElements(v)
	if err := lim.checkNodes(n); err != nil {
		return nil, err
	}
	if names, ok := plainStrings(v, n); ok {
		return names, nil
	}
	var names []string
	err := json.Unmarshal(v, &names)
	return names, err
}

// nodeObjects decodes Nodes, a NodeList, into the JSON of each Node: nil for null, else non-nil.
// encoding/json checks the whole value and the list's own fields, as for a corev1.NodeList.
func nodeObjects(v []byte, lim decodeLimits) ([][]byte, error) {
	if string(v) == "null" {
		return nil, nil
	}
	var list struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty"`
		Items           nodeItems `json:"items"`
	}
	list.Items.lim = lim
	if err := json.Unmarshal(v, &list); err != nil {
		return nil, err
	}
	if list.Items.spans == nil {
		return [][]byte{}, nil
	}
	return list.Items.spans, nil
}

// nodeItems receives NodeList.items from encoding/json, which has checked that the value is
// valid JSON, and keeps each element's bytes.
type nodeItems struct {
	lim   decodeLimits
	spans [][]byte
	seen  bool
}

func (n *nodeItems) UnmarshalJSON(data []byte) error {
	if n.seen {
		return errNodesTwice
	}
	n.seen = true
	if string(data) == "null" {
		return nil
	}
	if data[0] != '[' {
		return errors.New("the items of Nodes are not an array")
	}
	count := countElements(data)
	if err := n.lim.checkNodes(count); err != nil {
		return err
	}
	// The elements alias the request body, which json.Unmarshal was given and which outlives
	// the request's decoding.
	n.spans = make([][]byte, 0, count)
	i := skipSpace(data, 1)
	if data[i] == ']' {
		return nil
	}
	for {
		end, ok := skipValue(data, i)
		if !ok {
			return errors.New("truncated Nodes.items")
		}
		n.spans = append(n.spans, data[i:end])
		i = skipSpace(data, end)
		if data[i] == ']' {
			return nil
		}
		i = skipSpace(data, i+1) // past ','
	}
}

// eachNode decodes the Node objects of a request one at a time into node, so that a request
// holds one decoded Node at most, and calls fn with each. An element that is not a Node fails
// the request, as it fails encoding/json decoding the whole list.
func eachNode(spans [][]byte, lim decodeLimits, node *corev1.Node, fn func(i int, node *corev1.Node)) error {
	for i, span := range spans {
		if err := lim.object(fmt.Sprintf("node %d of Nodes.items", i), countValues(span), len(span)); err != nil {
			return err
		}
		*node = corev1.Node{}
		if err := json.Unmarshal(span, node); err != nil {
			return fmt.Errorf("%w: Nodes.items[%d] is not a Node: %w", errRequest, i, err)
		}
		if len(node.Name) > maxNodeNameLength {
			return fmt.Errorf("%w: the name of node %d of Nodes.items is longer than the %d characters a node name can have", errTooLarge, i, maxNodeNameLength)
		}
		fn(i, node)
	}
	return nil
}

// countValues counts the array elements and object members in the JSON value v, at any depth:
// each is at least one allocation or one struct when decoded. For valid JSON, every ',' outside
// strings separates two of them, and every non-empty array or object holds one more.
func countValues(v []byte) int {
	n, _ := countJSON(v)
	return n
}

// countElements counts the elements of the JSON array v, or returns 0 for another value.
func countElements(v []byte) int {
	if len(v) == 0 || v[0] != '[' {
		return 0
	}
	_, n := countJSON(v)
	return n
}

// countJSON counts the values at any depth in v, as countValues, and those at the top level of
// v, the elements or members of v itself. It reads v once, without validating it.
func countJSON(v []byte) (all, top int) {
	depth := 0
	opened := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		if opened && c != ']' && c != '}' {
			all++
			if depth == 1 {
				top++
			}
		}
		opened = false
		switch c {
		case '"':
			end, ok := skipString(v, i)
			if !ok {
				return all, top
			}
			i = end - 1
		case '[', '{':
			depth++
			opened = true
		case ']', '}':
			depth--
		case ',':
			all++
			if depth == 1 {
				top++
			}
		}
	}
	return all, top
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

// plainStrings reads null or an array of n plain strings. All names share one allocation.
func plainStrings(v []byte, n int) ([]string, bool) {
	if string(v) == "null" {
		return nil, true
	}
	if len(v) < 2 || v[0] != '[' {
		return nil, false
	}
	all := string(v)
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
	// message, when set, is the node's message instead of reason.message(): the reservation
	// reasons name the reservations.
	message string
}

func appendFilterResult(out []byte, names []string, passed []int, rejected []rejection) []byte {
	out = append(out, `{"Nodes":null,"NodeNames":[`...)
	for j, i := range passed {
		if j > 0 {
			out = append(out, ',')
		}
		out = appendString(out, names[i])
	}
	out = append(out, `],"FailedNodes":`...)
	return appendFailedAndError(out, rejected)
}

// appendFilterTail ends a result whose Nodes.items the caller has written.
func appendFilterTail(out []byte, rejected []rejection) []byte {
	out = append(out, `]},"NodeNames":null,"FailedNodes":`...)
	return appendFailedAndError(out, rejected)
}

func appendFailedAndError(out []byte, rejected []rejection) []byte {
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
		if r.message != "" {
			out = appendString(out, r.message)
		} else {
			out = appendString(out, r.reason.message())
		}
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
