package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"tablestore/internal/metricsbridge"
)

// The metric names and alert names of the operator docs (docs_test.go
// reads the pages) against the families the code defines and the rules
// of deploy/monitoring.

// metricDefinitions returns every metric family the module's code
// defines, by full name, with its label names: each prometheus.*Opts
// literal with literal Namespace, Subsystem and Name (the roles'
// metrics.go files and their neighbours), the labels a New…Vec call gives
// it as a literal, and the Raft families internal/metricsbridge builds
// from its table.
func metricDefinitions(t *testing.T) map[string][]string {
	t.Helper()
	out := metricsbridge.RaftFamilies()
	fset := token.NewFileSet()
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "proto" || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if name, labels := vecDefinition(n); name != "" {
				out[name] = labels
			} else if name := optsName(n); name != "" && out[name] == nil {
				out[name] = nil
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// vecDefinition is the family and label names of a
// prometheus.New…Vec(opts, []string{…}) call ("" for other nodes).
func vecDefinition(n ast.Node) (name string, labels []string) {
	call, ok := n.(*ast.CallExpr)
	if !ok || len(call.Args) != 2 {
		return "", nil
	}
	if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || !strings.HasPrefix(sel.Sel.Name, "New") || !strings.HasSuffix(sel.Sel.Name, "Vec") {
		return "", nil
	}
	list, ok := call.Args[1].(*ast.CompositeLit)
	if !ok {
		return "", nil
	}
	for _, e := range list.Elts {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			l, _ := strconv.Unquote(lit.Value)
			labels = append(labels, l)
		}
	}
	return optsName(call.Args[0]), labels
}

// optsName is the full name a prometheus.*Opts literal gives its family
// ("" for other nodes, or a name that is not spelt out in literals).
func optsName(n ast.Node) string {
	lit, ok := n.(*ast.CompositeLit)
	if !ok {
		return ""
	}
	sel, ok := lit.Type.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if pkg, isIdent := sel.X.(*ast.Ident); !isIdent || pkg.Name != "prometheus" || !strings.HasSuffix(sel.Sel.Name, "Opts") {
		return ""
	}
	parts := map[string]string{}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		val, isLit := kv.Value.(*ast.BasicLit)
		if key == nil || !isLit || val.Kind != token.STRING {
			continue
		}
		parts[key.Name], _ = strconv.Unquote(val.Value)
	}
	if parts["Name"] == "" {
		return ""
	}
	return prometheus.BuildFQName(parts["Namespace"], parts["Subsystem"], parts["Name"])
}

// TestDocsMetricDefinitionsComplete: the definitions the docs checks read
// cover every tablestore family the binary's registry exports (a family
// defined some other way would escape them), and each belongs to a role's
// subsystem (metricsbridge.RoleSubsystems), so some role serves it.
func TestDocsMetricDefinitionsComplete(t *testing.T) {
	defined := metricDefinitions(t)
	metricsbridge.InstallRaftSink()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, ok := defined[mf.GetName()]; strings.HasPrefix(mf.GetName(), "tablestore_") && !ok {
			t.Errorf("the registry exports %s, which metricDefinitions does not find", mf.GetName())
		}
	}
	owned := map[string]bool{}
	for _, subs := range metricsbridge.RoleSubsystems {
		for _, s := range subs {
			owned[s] = true
		}
	}
	for name := range defined {
		sub, _, _ := strings.Cut(strings.TrimPrefix(name, "tablestore_"), "_")
		if !strings.HasPrefix(name, "tablestore_") || !owned[sub] {
			t.Errorf("%s: not tablestore_<subsystem of a role>_…", name)
		}
	}
	if len(defined) < 80 {
		t.Errorf("found %d metric definitions, expected about a hundred (did the scan break?)", len(defined))
	}
}

// monitoringFiles are the alert rules and dashboard operators load.
var monitoringFiles = []string{
	"../../deploy/monitoring/alerts.yaml",
	"../../deploy/monitoring/grafana-dashboard.json",
	"../../deploy/kubernetes/monitoring/prometheusrule.yaml",
}

var (
	// metricMentionRe is a family name (tablestore_ alone is the
	// namespace, tablestore_raft_* a glob).
	metricMentionRe = regexp.MustCompile(`(?:^|[^\w])(tablestore_[a-z0-9_]*)`)
	// metricShorthandRe is the docs' shorthand for a name sharing the
	// subsystem of the last full name before it: …_capacity_bytes,
	// ..._server_disk_full, `_barriers_total`.
	metricShorthandRe = regexp.MustCompile("(?:…|\\.\\.\\.|`)(_[a-z][a-z0-9_]*[a-z0-9])")
)

// metricMention is a metric name in a doc; a shorthand carries the full
// name it abbreviates from.
type metricMention struct {
	where, name, from string
	glob              bool
}

// metricMentions returns the metric names of text; with last (the last
// full name of the paragraph so far, updated) its shorthands too.
func metricMentions(where, text string, last *string) []metricMention {
	type hit struct {
		at int
		m  metricMention
	}
	var hits []hit
	for _, loc := range metricMentionRe.FindAllStringSubmatchIndex(text, -1) {
		name, end := text[loc[2]:loc[3]], loc[3]
		if end < len(text) && (text[end] == '-' || text[end] >= 'A' && text[end] <= 'Z') {
			continue // a volume name: tablestore_masterN-data
		}
		glob := end < len(text) && text[end] == '*' || name == "tablestore_"
		hits = append(hits, hit{loc[2], metricMention{where: where, name: name, glob: glob}})
	}
	if last != nil {
		for _, loc := range metricShorthandRe.FindAllStringSubmatchIndex(text, -1) {
			hits = append(hits, hit{loc[2], metricMention{where: where, name: text[loc[2]:loc[3]]}})
		}
	}
	sort.Slice(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
	var out []metricMention
	for _, h := range hits {
		switch {
		case last == nil || h.m.glob:
		case strings.HasPrefix(h.m.name, "_"):
			h.m.from = *last
		default:
			*last = h.m.name
		}
		out = append(out, h.m)
	}
	return out
}

// seriesSuffixes are what a histogram's series add to its family name;
// with genericSuffixes, what the docs say of names in general ("`_total`
// on counters", "base units (`_seconds`)").
var (
	seriesSuffixes  = []string{"_bucket", "_count", "_sum"}
	genericSuffixes = append([]string{"_total", "_seconds"}, seriesSuffixes...)
)

// resolve returns the family a mention names ("" for a glob or a bare
// suffix), or ok false when no defined family fits it.
func (m metricMention) resolve(defined map[string][]string) (family string, ok bool) {
	switch {
	case m.glob:
		for name := range defined {
			if strings.HasPrefix(name, m.name) {
				return "", true
			}
		}
		return "", false
	case strings.HasPrefix(m.name, "_"):
		return m.resolveShorthand(defined)
	}
	if _, ok := defined[m.name]; ok {
		return m.name, true
	}
	for _, s := range seriesSuffixes {
		if base, cut := strings.CutSuffix(m.name, s); cut {
			if _, ok := defined[base]; ok {
				return base, true
			}
		}
	}
	return "", false
}

// resolveShorthand finds the family of the full name's subsystem that ends
// with the shorthand, the one sharing the longest prefix with that name.
func (m metricMention) resolveShorthand(defined map[string][]string) (string, bool) {
	if slices.Contains(genericSuffixes, m.name) {
		return "", true
	}
	sub, _, _ := strings.Cut(strings.TrimPrefix(m.from, "tablestore_"), "_")
	best, bestLen := "", -1
	for name := range defined {
		if !strings.HasPrefix(name, "tablestore_"+sub+"_") || !strings.HasSuffix(name, m.name) {
			continue
		}
		n := 0
		for n < len(name) && n < len(m.from) && name[n] == m.from[n] {
			n++
		}
		if n > bestLen || n == bestLen && name < best {
			best, bestLen = name, n
		}
	}
	return best, m.from != "" && best != ""
}

// docMetricMentions returns the metric names of the operator docs and the
// monitoring files.
func docMetricMentions(t *testing.T) []metricMention {
	t.Helper()
	var out []metricMention
	last := ""
	for _, l := range allDocLines(t) {
		if strings.TrimSpace(l.text) == "" || strings.HasPrefix(l.text, "|") {
			last = "" // a shorthand abbreviates within its paragraph or row
		}
		out = append(out, metricMentions(l.where, l.text, &last)...)
	}
	for _, p := range monitoringFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			out = append(out, metricMentions(fmt.Sprintf("%s:%d", strings.TrimPrefix(p, "../../"), i+1), line, nil)...)
		}
	}
	return out
}

// TestDocsMetricNames: every metric name the operator docs, the alert
// rules and the dashboard mention is a family the code defines, and
// docs/operations.md mentions every family the code defines.
func TestDocsMetricNames(t *testing.T) {
	defined := metricDefinitions(t)
	documented := map[string]bool{}
	mentions := docMetricMentions(t)
	for _, m := range mentions {
		family, ok := m.resolve(defined)
		switch {
		case !ok && m.from != "":
			t.Errorf("%s: %s (after %s) is no family of that subsystem", m.where, m.name, m.from)
		case !ok:
			t.Errorf("%s: %s is no metric family tablestore defines", m.where, m.name)
		case strings.HasPrefix(m.where, "docs/operations.md"):
			documented[family] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(defined)) {
		if !documented[name] {
			t.Errorf("docs/operations.md does not document %s", name)
		}
	}
	if len(mentions) < 150 {
		t.Errorf("found %d metric mentions, expected more (did the extraction break?)", len(mentions))
	}
}

var (
	alertRuleRe = regexp.MustCompile(`(?m)^\s*- alert: (\w+)`)
	alertNameRe = regexp.MustCompile(`\bTablestore[A-Z][A-Za-z]+\b`)
)

// TestDocsAlertNames: every alert the docs name is a rule of
// deploy/monitoring/alerts.yaml, and docs/deploy.md names every rule.
func TestDocsAlertNames(t *testing.T) {
	b, err := os.ReadFile(monitoringFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]bool{}
	for _, m := range alertRuleRe.FindAllStringSubmatch(string(b), -1) {
		rules[m[1]] = true
	}
	named := map[string]bool{}
	for _, l := range allDocLines(t) {
		for _, a := range alertNameRe.FindAllString(l.text, -1) {
			if !rules[a] {
				t.Errorf("%s: %s is no alert of alerts.yaml", l.where, a)
			}
			if strings.HasPrefix(l.where, "docs/deploy.md") {
				named[a] = true
			}
		}
	}
	for _, a := range slices.Sorted(maps.Keys(rules)) {
		if !named[a] {
			t.Errorf("docs/deploy.md does not name the alert %s", a)
		}
	}
	if len(rules) < 5 {
		t.Errorf("found %d alert rules, expected more (did the extraction break?)", len(rules))
	}
}

// metricCellRe is one name of a metrics table's first cell, with the
// labels the docs give it: `tablestore_x_total{a,b}`, `…_y_bytes{server}`.
var metricCellRe = regexp.MustCompile(`^((?:…|\.\.\.)?_?[a-z0-9_]+)(?:\{([a-z_,]*)\})?$`)

// TestDocsMetricLabels: the metrics tables of operations.md give each
// family exactly the label names the code gives it (none written: none).
func TestDocsMetricLabels(t *testing.T) {
	defined := metricDefinitions(t)
	n := 0
	for _, l := range readDoc(t, "../../docs/operations.md") {
		if l.fenced || !strings.HasPrefix(l.text, "| `tablestore_") {
			continue
		}
		first := ""
		for _, span := range codeSpanRe.FindAllStringSubmatch(splitRow(l.text)[0], -1) {
			m := metricCellRe.FindStringSubmatch(span[1])
			if m == nil {
				t.Errorf("%s: %q is not name{labels}", l.where, span[1])
				continue
			}
			mention := metricMention{where: l.where, name: strings.TrimLeft(m[1], "….")}
			if first == "" {
				first = mention.name
			} else {
				mention.from = first
			}
			family, ok := mention.resolve(defined)
			if !ok || family == "" {
				continue // TestDocsMetricNames reports it
			}
			var doc []string
			if m[2] != "" {
				doc = strings.Split(m[2], ",")
			}
			if code := slices.Sorted(slices.Values(defined[family])); !slices.Equal(slices.Sorted(slices.Values(doc)), code) {
				t.Errorf("%s: %s: docs give labels %v, the code %v", l.where, family, doc, code)
			}
			n++
		}
	}
	if n < 80 {
		t.Errorf("checked the labels of %d families, expected about a hundred (did the extraction break?)", n)
	}
}
