package grafana

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
	"sigs.k8s.io/yaml"

	"github.com/tandemkit/tandem/metrics/collector"
)

const dashboardFile = "tandem-node.json"

// externalMetrics are series the dashboard reads that Tandem does not export, with who does.
var externalMetrics = map[string]string{
	"up": "Prometheus, per scrape target",
}

// otherTandemMetrics are exported by Tandem packages other than the collector; the test finds each
// name in its package's source, so a rename there fails here instead of leaving an empty panel.
var otherTandemMetrics = map[string]string{
	"tandem_node_reclaimable_cpu_cores":    "metrics/reporter",
	"tandem_node_reclaimable_memory_bytes": "metrics/reporter",
	"tandem_reporter_patches_total":        "metrics/reporter",
	"tandem_suppress_be_cpus":              "actuate/suppress",
	"tandem_suppress_changes_total":        "actuate/suppress",
	"tandem_evictions_total":               "actuate/evict",
	"tandem_eviction_refusals_total":       "actuate/evict",
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string         `json:"refId"`
	Expr       string         `json:"expr"`
	Datasource *datasourceRef `json:"datasource"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct{ X, Y, W, H int }
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name       string         `json:"name"`
			Expr       string         `json:"expr"`
			Datasource *datasourceRef `json:"datasource"`
		} `json:"list"`
	} `json:"annotations"`
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDashboardSchema validates the dashboard against dashboard.schema.json, the essentials of
// Grafana's dashboard model, with a JSON-schema validator.
func TestDashboardSchema(t *testing.T) {
	t.Parallel()
	schema := loadSchema(t)
	var doc any
	if err := json.Unmarshal(readFile(t, dashboardFile), &doc); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	res := validate.NewSchemaValidator(&schema, &schema, "", strfmt.Default).Validate(doc)
	for _, err := range res.Errors {
		t.Errorf("%s: %v", dashboardFile, err)
	}

	// The validator must reject what Grafana would: a panel without an id.
	bad := strings.Replace(string(readFile(t, dashboardFile)), `"id": 2,`, ``, 1)
	var badDoc any
	if err := json.Unmarshal([]byte(bad), &badDoc); err != nil {
		t.Fatal(err)
	}
	if res := validate.NewSchemaValidator(&schema, &schema, "", strfmt.Default).Validate(badDoc); res.IsValid() {
		t.Error("the schema accepts a panel without an id; it checks nothing")
	}
}

// loadSchema reads dashboard.schema.json with its "#/definitions/…" references inlined: the
// validator (kube-openapi's, as the apiserver uses for CRDs) takes no references.
func loadSchema(t *testing.T) spec.Schema {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal(readFile(t, "dashboard.schema.json"), &raw); err != nil {
		t.Fatalf("dashboard.schema.json: %v", err)
	}
	defs, _ := raw["definitions"].(map[string]any)
	delete(raw, "definitions")
	var inline func(v any, depth int) any
	inline = func(v any, depth int) any {
		if depth > 20 {
			t.Fatal("dashboard.schema.json: references nest too deep (a cycle?)")
		}
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				name, found := strings.CutPrefix(ref, "#/definitions/")
				if !found || defs[name] == nil {
					t.Fatalf("dashboard.schema.json: unresolvable reference %s", ref)
				}
				return inline(defs[name], depth+1)
			}
			out := make(map[string]any, len(v))
			for k, e := range v {
				out[k] = inline(e, depth)
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, e := range v {
				out[i] = inline(e, depth)
			}
			return out
		}
		return v
	}
	b, err := json.Marshal(inline(raw, 0))
	if err != nil {
		t.Fatal(err)
	}
	var schema spec.Schema
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("dashboard.schema.json: %v", err)
	}
	return schema
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDashboardStructure checks what the schema cannot: unique ids, no overlapping panels, every
// query on the dashboard's data-source variable, and rows in order.
func TestDashboardStructure(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["node"] != "query" {
		t.Fatalf("templating variables = %v, want datasource (datasource) and node (query)", vars)
	}
	wantDS := datasourceRef{Type: "prometheus", UID: "${datasource}"}
	ids := map[int]string{}
	type cell struct{ x, y int }
	used := map[cell]int{}
	var all []panel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	for _, p := range all {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the 24-column grid: %+v", p.Title, p.GridPos)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := used[cell{x, y}]; ok {
					t.Errorf("panel %q overlaps panel %q at %d,%d", p.Title, ids[other], x, y)
				}
				used[cell{x, y}] = p.ID
			}
		}
		if p.Type == "row" {
			if len(p.Targets) != 0 {
				t.Errorf("row %q has queries", p.Title)
			}
			continue
		}
		if p.Datasource == nil || *p.Datasource != wantDS {
			t.Errorf("panel %q datasource = %+v, want %+v", p.Title, p.Datasource, wantDS)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] {
				t.Errorf("panel %q: refId %s twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || *tg.Datasource != wantDS {
				t.Errorf("panel %q query %s datasource = %+v, want %+v", p.Title, tg.RefID, tg.Datasource, wantDS)
			}
			if !strings.Contains(tg.Expr, "$node") && !strings.Contains(tg.Expr, `job="tandem-proxy"`) {
				t.Errorf("panel %q query %s ignores the node selector: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" && (a.Datasource == nil || *a.Datasource != wantDS) {
			t.Errorf("annotation %q datasource = %+v, want %+v", a.Name, a.Datasource, wantDS)
		}
	}
}

// capture is a Registerer that keeps what is registered, to list the collector's metric names.
type capture struct{ cs []prometheus.Collector }

func (c *capture) Register(x prometheus.Collector) error   { c.cs = append(c.cs, x); return nil }
func (c *capture) MustRegister(xs ...prometheus.Collector) { c.cs = append(c.cs, xs...) }
func (c *capture) Unregister(prometheus.Collector) bool    { return false }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func collectorMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := &capture{}
	if _, err := collector.New(collector.DefaultConfig(), collector.Deps{ProcRoot: "/proc", CgroupRoot: "/sys/fs/cgroup", Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range reg.cs {
		c.Describe(ch)
	}
	close(ch)
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		t.Fatal("the collector describes no metrics")
	}
	return names
}

// packageMetrics lists the metric names a package's non-test source declares: string literals that
// are whole names, and prometheus Opts literals built from Namespace, Subsystem and Name.
func packageMetrics(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && strings.HasPrefix(s, "tandem_") {
					names[s] = true
				}
			case *ast.CompositeLit:
				parts := map[string]string{}
				for _, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, ok1 := kv.Key.(*ast.Ident)
					lit, ok2 := kv.Value.(*ast.BasicLit)
					if ok1 && ok2 && lit.Kind == token.STRING {
						parts[key.Name], _ = strconv.Unquote(lit.Value)
					}
				}
				if parts["Name"] != "" {
					var fq []string
					for _, k := range []string{"Namespace", "Subsystem", "Name"} {
						if parts[k] != "" {
							fq = append(fq, parts[k])
						}
					}
					names[strings.Join(fq, "_")] = true
				}
			}
			return true
		})
	}
	return names
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	braces     = regexp.MustCompile(`\{[^}]*\}`)
	brackets   = regexp.MustCompile(`\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	variable   = regexp.MustCompile(`\$(?:\{[^}]*\}|\w+)`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

var promqlKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
	"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}

// metricNames returns the metric names a PromQL expression reads: identifiers left after label
// matchers, ranges, grouping clauses and variables are removed, except function names.
func metricNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, `""`)
	s = braces.ReplaceAllString(s, " ")
	s = brackets.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	s = variable.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range identifier.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // the unit of a number, as in 1e6
		}
		if promqlKeywords[strings.ToLower(name)] || strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " "), "(") {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want []string
	}{
		{`tandem_a{node=~"$node"}`, []string{"tandem_a"}},
		{`sum by (qos) (rate(tandem_b_total{x="y{z}"}[$__rate_interval])) / on(qos) tandem_c`, []string{"tandem_b_total", "tandem_c"}},
		{`histogram_quantile(0.99, sum by (le) (rate(h_bucket[5m]))) > 1e-3`, []string{"h_bucket"}},
		{`time() - up{job="x"}`, []string{"up"}},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%s) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

// TestDashboardMetricsExist checks that every series a query reads is one Tandem exports (by the
// collector's own descriptions and the other packages' source) or a documented external one.
func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	known := collectorMetrics(t)
	pkgCache := map[string]map[string]bool{}
	for name, dir := range otherTandemMetrics {
		if pkgCache[dir] == nil {
			pkgCache[dir] = packageMetrics(t, dir)
		}
		if !pkgCache[dir][name] {
			t.Errorf("%s no longer declares %s; update the dashboard and otherTandemMetrics", dir, name)
		}
		known[name] = true
	}
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			exprs = append(exprs, a.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				exprs = append(exprs, strings.TrimSuffix(strings.TrimPrefix(s, "label_values("), ", node)"))
			}
		}
	}
	usedNames := map[string]bool{}
	for _, e := range exprs {
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("query reads no metric: %s", e)
		}
		for _, n := range names {
			base := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && known[b] {
					base = b
				}
			}
			usedNames[base] = true
			if !known[base] && externalMetrics[base] == "" {
				t.Errorf("query reads %s, which neither Tandem nor a documented external source exports: %s", n, e)
			}
		}
	}
	// The issue asks for these views; a dashboard edit must not lose them.
	for _, must := range []string{"tandem_node_reclaimable_cpu_cores", "tandem_node_cpu_usage_cores", "tandem_container_cpu_usage_cores",
		"tandem_container_cpu_cfs_throttled_periods_total", "tandem_node_pressure_some_seconds_total", "tandem_suppress_be_cpus", "tandem_evictions_total"} {
		if !usedNames[must] {
			t.Errorf("the dashboard no longer shows %s", must)
		}
	}
}

// TestScrapeConfig checks the scrape snippet is a list of jobs whose relabel regexes compile (as
// Prometheus anchors them) and that the node job adds the node label the dashboard selects on.
func TestScrapeConfig(t *testing.T) {
	t.Parallel()
	var jobs []struct {
		JobName        string `json:"job_name"`
		HonorLabels    bool   `json:"honor_labels"`
		RelabelConfigs []struct {
			SourceLabels []string `json:"source_labels"`
			Regex        string   `json:"regex"`
			TargetLabel  string   `json:"target_label"`
			Replacement  string   `json:"replacement"`
			Action       string   `json:"action"`
		} `json:"relabel_configs"`
		MetricRelabelConfigs []struct {
			Regex string `json:"regex"`
		} `json:"metric_relabel_configs"`
	}
	// Lenient decoding: the test models only the fields it checks.
	if err := yaml.Unmarshal(readFile(t, filepath.Join("..", "prometheus", "scrape.yaml")), &jobs); err != nil {
		t.Fatalf("scrape.yaml: %v", err)
	}
	byName := map[string]int{}
	for i, j := range jobs {
		byName[j.JobName] = i
		for _, r := range j.RelabelConfigs {
			if r.Regex == "" {
				continue
			}
			if _, err := regexp.Compile("^(?:" + r.Regex + ")$"); err != nil {
				t.Errorf("job %s: regex %q: %v", j.JobName, r.Regex, err)
			}
		}
	}
	i, ok := byName["tandem-proxy"]
	if !ok {
		t.Fatalf("no tandem-proxy job in scrape.yaml: %v", byName)
	}
	proxy := jobs[i]
	if !proxy.HonorLabels {
		t.Error("tandem-proxy job without honor_labels: the collector's node label would become exported_node")
	}
	var nodeLabel, port bool
	for _, r := range proxy.RelabelConfigs {
		if r.TargetLabel == "node" {
			nodeLabel = true
		}
		if r.TargetLabel == "__address__" {
			re := regexp.MustCompile("^(?:" + r.Regex + ")$")
			got := re.ReplaceAllString("10.0.0.7:10250", strings.ReplaceAll(r.Replacement, "${1}", "$1"))
			port = got == "10.0.0.7:9316"
			if !port {
				t.Errorf("kubelet address 10.0.0.7:10250 rewrites to %q, want 10.0.0.7:9316", got)
			}
		}
	}
	if !nodeLabel || !port {
		t.Errorf("tandem-proxy job: node label %v, port rewrite %v; want both", nodeLabel, port)
	}
}
