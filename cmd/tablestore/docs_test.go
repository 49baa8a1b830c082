package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"tablestore/ctl"
	"tablestore/frontend"
	"tablestore/frontend/auth"
	"tablestore/loadgen"
	"tablestore/master/scheduler"
	"tablestore/sim"
)

// operatorDocs are the pages operators read, relative to this package.
var operatorDocs = []string{"../../README.md", "../../docs/operations.md", "../../docs/deploy.md"}

// docLine is one line of a doc: a fenced code block's command lines are
// joined across their `\` continuations.
type docLine struct {
	where   string // file:line
	text    string
	section string // the "## " heading above it
	fenced  bool
}

// readDoc splits a markdown file into lines that know their section and
// whether they are in a code block.
func readDoc(t *testing.T, path string) []docLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(path, "../../")
	var out []docLine
	section, fenced := "", false
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := docLine{where: fmt.Sprintf("%s:%d", name, i+1), text: lines[i], section: section, fenced: fenced}
		switch {
		case strings.HasPrefix(l.text, "```"):
			fenced = !fenced
			continue
		case !fenced && strings.HasPrefix(l.text, "## "):
			section = strings.TrimPrefix(l.text, "## ")
		}
		for fenced && strings.HasSuffix(l.text, `\`) && i+1 < len(lines) {
			i++
			l.text = strings.TrimSuffix(l.text, `\`) + " " + strings.TrimSpace(lines[i])
		}
		out = append(out, l)
	}
	return out
}

// allDocLines reads every operator doc.
func allDocLines(t *testing.T) []docLine {
	t.Helper()
	var out []docLine
	for _, p := range operatorDocs {
		out = append(out, readDoc(t, p)...)
	}
	return out
}

// commandFlagSets returns the flag set of every command the docs describe,
// built as the binary builds it, by the name the docs use: the server
// roles, loadgen, sim, "ctl" (the common flags) and "ctl <command>".
func commandFlagSets(t *testing.T) map[string]*flag.FlagSet {
	t.Helper()
	// The front-end's --accounts defaults to $AZURITE_ACCOUNTS, as the docs
	// say; a set value makes that visible in the flag's default.
	t.Setenv(frontend.AccountsEnv, "docs-test:a2V5")
	out := map[string]*flag.FlagSet{"loadgen": loadgen.FlagSet(), "sim": sim.FlagSet()}
	for name, sp := range serverSpecs {
		out[name] = sp().flagSet(&common{})
	}
	ctlCommon, _ := ctl.FlagSet("")
	out["ctl"] = ctlCommon
	for name := range ctl.Synopses() {
		fs, ok := ctl.FlagSet(name)
		if !ok {
			t.Fatalf("ctl.FlagSet(%q): unknown command", name)
		}
		out["ctl "+name] = fs
	}
	return out
}

// flagNames lists fs's flags, sorted.
func flagNames(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	sort.Strings(out)
	return out
}

// codeSpanRe is an inline code span.
var codeSpanRe = regexp.MustCompile("`([^`]+)`")

// splitRow splits a table row into its cells; a | inside a code span does
// not split.
func splitRow(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimSuffix(strings.TrimPrefix(row, "|"), "|")
	var cells []string
	var cur strings.Builder
	inCode := false
	for _, r := range row {
		switch {
		case r == '`':
			inCode = !inCode
		case r == '|' && !inCode:
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// flagRow is one row of a flags reference table.
type flagRow struct {
	where, name, def, what string
}

// sectionRoleRe names the command a "## … (`tablestore X`)" section
// describes.
var sectionRoleRe = regexp.MustCompile("\\(`tablestore ([a-z]+)`\\)")

// flagTables returns operations.md's flag reference tables (header
// "| flag | default | …") by the command of their section; in the ctl
// section the table is that of the common flags.
func flagTables(t *testing.T) map[string][]flagRow {
	t.Helper()
	out := map[string][]flagRow{}
	inTable := false
	for _, l := range readDoc(t, "../../docs/operations.md") {
		if l.fenced || !strings.HasPrefix(l.text, "|") {
			inTable = false
			continue
		}
		cells := splitRow(l.text)
		if len(cells) >= 3 && cells[0] == "flag" && cells[1] == "default" {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(cells[0], "---") {
			continue
		}
		m := sectionRoleRe.FindStringSubmatch(l.section)
		if m == nil {
			t.Errorf("%s: a flag table outside a command's section (%q)", l.where, l.section)
			continue
		}
		name, ok := strings.CutPrefix(strings.Trim(cells[0], "`"), "--")
		if !ok || len(cells) != 3 {
			t.Errorf("%s: a flag row is | `--name` | default | what |, got %q", l.where, l.text)
			continue
		}
		out[m[1]] = append(out[m[1]], flagRow{where: l.where, name: name, def: cells[1], what: cells[2]})
	}
	return out
}

// namedDefaults are default cells that name a value rather than spell it.
var namedDefaults = map[string]string{"Azurite's well-known key": auth.DevAccountKey}

// usageDefaultRe is "(default X)" or "(default: X)" in a flag's help, which
// flag.Func flags use for a default they cannot show as one.
var usageDefaultRe = regexp.MustCompile(`\(default:? ([^)]*)\)`)

// codeDefault is the default the code gives f: its registered default,
// else false for a boolean (flag.BoolFunc), else the one its help states
// (a flag.Func flag, which cannot show one).
func codeDefault(f *flag.Flag) string {
	if f.DefValue != "" {
		return f.DefValue
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "false"
	}
	if m := usageDefaultRe.FindStringSubmatch(f.Usage); m != nil {
		return m[1]
	}
	return ""
}

// defaultAgrees reports whether a docs default cell states f's default: an
// empty cell for an empty default, else a code span holding it (quotes
// around strings allowed; `$VAR` for a default taken from the
// environment) or a named value of namedDefaults.
func defaultAgrees(cell string, f *flag.Flag) bool {
	if strings.TrimSpace(cell) == "" {
		return f.DefValue == ""
	}
	want := codeDefault(f)
	if v, ok := namedDefaults[strings.Trim(cell, "` ")]; ok {
		return v == want
	}
	for _, m := range codeSpanRe.FindAllStringSubmatch(cell, -1) {
		v := m[1]
		if env, ok := strings.CutPrefix(v, "$"); ok {
			v = os.Getenv(env)
		}
		if strings.Trim(v, `"`) == want {
			return true
		}
	}
	return false
}

// TestDocsFlagTables: each command's flag table in docs/operations.md
// lists exactly the flags the command registers, once each, with the
// default the code gives it.
func TestDocsFlagTables(t *testing.T) {
	sets := commandFlagSets(t)
	tables := flagTables(t)
	for _, name := range []string{"master", "partitionserver", "frontend", "dev", "ctl", "loadgen", "sim"} {
		rows := tables[name]
		if len(rows) == 0 {
			t.Errorf("docs/operations.md has no flag table for tablestore %s", name)
			continue
		}
		fs := sets[name]
		seen := map[string]bool{}
		for _, r := range rows {
			f := fs.Lookup(r.name)
			switch {
			case f == nil:
				t.Errorf("%s: tablestore %s has no flag --%s", r.where, name, r.name)
			case seen[r.name]:
				t.Errorf("%s: --%s listed twice for tablestore %s", r.where, r.name, name)
			case !defaultAgrees(r.def, f):
				t.Errorf("%s: tablestore %s --%s: docs say default %q, the code's is %q", r.where, name, r.name, r.def, codeDefault(f))
			}
			seen[r.name] = true
		}
		for _, n := range flagNames(fs) {
			if !seen[n] && !coveredElsewhere(name, n) {
				t.Errorf("docs/operations.md: tablestore %s --%s is missing from its flag table", name, n)
			}
		}
	}
}

// coveredElsewhere reports flags a command's table leaves to a sentence:
// sim takes every scheduler threshold of the master ("same defaults as in
// the master table", which TestDocsSimSharesMasterDefaults checks).
func coveredElsewhere(command, name string) bool {
	return command == "sim" && schedulerFlags().Lookup(name) != nil
}

// schedulerFlags are the master's policy thresholds (master/scheduler).
func schedulerFlags() *flag.FlagSet {
	cfg := scheduler.DefaultConfig()
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	return fs
}

// TestDocsSimSharesMasterDefaults: operations.md says sim takes every
// threshold flag of the master with the master's defaults.
func TestDocsSimSharesMasterDefaults(t *testing.T) {
	sets := commandFlagSets(t)
	schedulerFlags().VisitAll(func(f *flag.Flag) {
		s, m := sets["sim"].Lookup(f.Name), sets["master"].Lookup(f.Name)
		switch {
		case s == nil || m == nil:
			t.Errorf("--%s: on sim %v, on master %v, want both", f.Name, s != nil, m != nil)
		case s.DefValue != m.DefValue:
			t.Errorf("--%s: sim's default %q, the master's %q", f.Name, s.DefValue, m.DefValue)
		}
	})
}

// TestDocsCtlSynopses: each ctl command's synopsis (the commands table of
// operations.md equals it, ctl's TestDocsCommands) names every flag of
// its own.
func TestDocsCtlSynopses(t *testing.T) {
	ctlCommon, _ := ctl.FlagSet("")
	for name, args := range ctl.Synopses() {
		fs, _ := ctl.FlagSet(name)
		for _, f := range flagMentions(args) {
			if fs.Lookup(f) == nil {
				t.Errorf("ctl %s: synopsis %q names --%s, which it does not take", name, args, f)
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			if ctlCommon.Lookup(f.Name) == nil && !strings.Contains(args, "--"+f.Name) {
				t.Errorf("ctl %s: synopsis %q does not name its flag --%s", name, args, f.Name)
			}
		})
	}
}

// flagMentionRe is a --flag mention; a camelCase name (Azurite's
// --tableHost) is not one of ours and is skipped by the caller.
var flagMentionRe = regexp.MustCompile(`(?:^|[^\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)

// flagMentions returns the flag names text mentions.
func flagMentions(text string) []string {
	var out []string
	for _, m := range flagMentionRe.FindAllStringSubmatchIndex(text, -1) {
		if end := m[3]; end < len(text) && (text[end] == '_' || text[end] >= 'A' && text[end] <= 'Z') {
			continue
		}
		out = append(out, text[m[2]:m[3]])
	}
	return out
}

// invocationRe is a command line of the binary: `tablestore ROLE`,
// `/tablestore ROLE`, README's `$B ROLE`, a bare `ctl COMMAND` in a code
// span, or `make run ARGS=` (dev).
var invocationRe = regexp.MustCompile(`(?:^|[\s/'"(])(?:tablestore|\$B)\s+([a-z]+)\b|(?:^|[\s'"(])(ctl)\s|make run (ARGS)=`)

// isInvocation tells a command line of the binary from the namespace
// (kubectl -n tablestore exec): the word after it must be a command.
func isInvocation(text string, m []int) bool {
	if m[2] < 0 {
		return true
	}
	_, ok := commands[text[m[2]:m[3]]]
	return ok || text[m[2]:m[3]] == "help"
}

// placeholderRe is a placeholder such as <every master>.
var placeholderRe = regexp.MustCompile(`<[^>]*>`)

// attributed is a flag mention and the command it belongs to ("" when the
// text does not say: any command's will do).
type attributed struct {
	where, command, flag string
}

// invocationFlags attributes the flags of a code text's command lines:
// each to the command invoked before it (a ctl command line: to that ctl
// command), none of those before the first invocation (kubectl's, docker's).
// found reports whether text invokes the binary at all.
func invocationFlags(where, text string, ctlCommands map[string]string) (out []attributed, found bool) {
	text = placeholderRe.ReplaceAllString(text, "X")
	if i := strings.Index(text, " #"); i >= 0 {
		text = text[:i] // a shell comment
	}
	var locs [][]int
	for _, m := range invocationRe.FindAllStringSubmatchIndex(text, -1) {
		if isInvocation(text, m) {
			locs = append(locs, m)
		}
	}
	for k, m := range locs {
		end := len(text)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		cmd := "dev"
		switch {
		case m[2] >= 0:
			cmd = text[m[2]:m[3]]
		case m[4] >= 0:
			cmd = "ctl"
		}
		rest := text[m[1]:end]
		if cmd == "ctl" {
			cmd = ctlCommand(rest, ctlCommands)
		}
		for _, f := range flagMentions(rest) {
			out = append(out, attributed{where, cmd, f})
		}
	}
	return out, len(locs) > 0
}

// ctlCommand names the ctl command of a ctl command line's words ("ctl"
// when none is named).
func ctlCommand(words string, commands map[string]string) string {
	if cmd, _ := ctlCommandAt(strings.Fields(words), commands); cmd != "" {
		return "ctl " + cmd
	}
	return "ctl"
}

// ctlCommandAt finds the command among a ctl command line's words: the
// first that is not a flag or a flag's value, at index i; cmd is "" when
// that word is no command, or there is none (i == len(words)).
func ctlCommandAt(words []string, commands map[string]string) (cmd string, i int) {
	ctlCommon, _ := ctl.FlagSet("")
	for ; i < len(words); i++ {
		name, ok := strings.CutPrefix(words[i], "--")
		if !ok {
			if _, known := commands[words[i]]; known {
				return words[i], i
			}
			return "", i
		}
		if f := ctlCommon.Lookup(name); f != nil {
			if b, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool || !b.IsBoolFlag() {
				i++ // its value
			}
		}
	}
	return "", i
}

func isCtlCommand(commands map[string]string, word string) bool {
	_, ok := commands[word]
	return ok
}

// foreignPrograms start code that runs another program; its flags are not
// ours (a binary command line in it still is).
var foreignPrograms = []string{"kubectl", "docker", "kustomize", "curl", "go ", "helm", "kind ", "azurite-table", "make "}

// docFlagMentions returns every --flag mention of the operator docs (and
// of the monitoring files, any command's) with the command it belongs to: command lines of the binary (fenced or in a
// code span) attribute their flags to their command; other fenced lines
// are other programs' (skipped); the rest of a row of a command's flag
// table to that command; the rest of any other line (prose, cells, code
// spans that run nothing, which name other roles' flags freely: "the
// master's --server-timeout") to any command.
func docFlagMentions(t *testing.T) []attributed {
	t.Helper()
	ctlCommands := ctl.Synopses()
	rowCommand := map[string]string{}
	for command, rows := range flagTables(t) {
		for _, r := range rows {
			rowCommand[r.where] = command
		}
	}
	var out []attributed
	for _, l := range allDocLines(t) {
		if l.fenced {
			got, _ := invocationFlags(l.where, l.text, ctlCommands)
			out = append(out, got...)
			continue
		}
		context := rowCommand[l.where]
		prose := codeSpanRe.ReplaceAllStringFunc(l.text, func(span string) string {
			code := strings.Trim(span, "`")
			if word, _, _ := strings.Cut(code, " "); isCtlCommand(ctlCommands, word) && strings.HasPrefix(l.section, "ctl ") {
				code = "ctl " + code // `events --follow` in the ctl section
			}
			got, found := invocationFlags(l.where, code, ctlCommands)
			out = append(out, got...)
			for _, p := range foreignPrograms {
				found = found || strings.HasPrefix(code, p)
			}
			if found {
				return ""
			}
			return span
		})
		for _, f := range flagMentions(prose) {
			out = append(out, attributed{l.where, context, f})
		}
	}
	for _, p := range monitoringFiles { // the alerts' descriptions
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, f := range flagMentions(line) {
				out = append(out, attributed{fmt.Sprintf("%s:%d", strings.TrimPrefix(p, "../../"), i+1), "", f})
			}
		}
	}
	return out
}

// TestDocsFlagMentions: every --flag the operator docs mention exists on
// the command they attribute it to (any command where they do not say).
func TestDocsFlagMentions(t *testing.T) {
	sets := commandFlagSets(t)
	anyCommand := map[string]bool{}
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) { anyCommand[f.Name] = true })
	}
	anyCommand["help"] = true // the flag package's own
	mentions := docFlagMentions(t)
	for _, m := range mentions {
		switch fs, known := sets[m.command]; {
		case m.command == "":
			if _, foreign := foreignFlags[m.flag]; !anyCommand[m.flag] && !foreign {
				t.Errorf("%s: --%s is a flag of no tablestore command", m.where, m.flag)
			}
		case !known:
			t.Errorf("%s: --%s given to tablestore %s, which is no command with flags", m.where, m.flag, m.command)
		case fs.Lookup(m.flag) == nil && m.flag != "help":
			t.Errorf("%s: tablestore %s has no flag --%s", m.where, m.command, m.flag)
		}
	}
	if len(mentions) < 300 {
		t.Errorf("found %d flag mentions in the docs, expected hundreds (did the extraction break?)", len(mentions))
	}
}

// foreignFlags are flags the docs' prose names that are no tablestore
// command's, with what they are.
var foreignFlags = map[string]string{
	"location": "Azurite's --location (README's Azurite table)",
	"replicas": "kubectl scale --replicas (deploy.md, Scaling)",
	"flag":     "the placeholder of `--flag=value` (deploy.md, Validation)",
}

// linkRe is a markdown link to a local page, optionally to a heading.
var linkRe = regexp.MustCompile(`\]\(([A-Za-z0-9_./-]*\.md)?(?:#([^)\s]+))?\)`)

// slug is GitHub's anchor of a heading: lower case, punctuation dropped,
// spaces as hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && unicode.IsLetter(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, l := range readDoc(t, path) {
		if !l.fenced && strings.HasPrefix(l.text, "#") {
			s := slug(strings.TrimSpace(strings.TrimLeft(l.text, "#")))
			for n := 1; out[s]; n++ { // GitHub numbers repeated headings
				s = fmt.Sprintf("%s-%d", strings.TrimSuffix(s, fmt.Sprintf("-%d", n-1)), n)
			}
			out[s] = true
		}
	}
	return out
}

// TestDocsLinks: every link of the operator docs to a page of the
// repository, or a heading of one, leads somewhere.
func TestDocsLinks(t *testing.T) {
	n := 0
	for _, l := range allDocLines(t) {
		if l.fenced {
			continue
		}
		page, _, _ := strings.Cut(l.where, ":")
		for _, m := range linkRe.FindAllStringSubmatch(l.text, -1) {
			target := filepath.Join("../..", filepath.Dir(page), m[1])
			if m[1] == "" {
				target = filepath.Join("../..", page)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link to %s: %v", l.where, m[1], err)
				continue
			}
			if m[2] != "" && strings.HasSuffix(target, ".md") && !anchors(t, target)[m[2]] {
				t.Errorf("%s: link to %s#%s: no such heading", l.where, m[1], m[2])
			}
			n++
		}
	}
	if n < 40 {
		t.Errorf("checked %d links, expected more (did the extraction break?)", n)
	}
}

// commandWordRe is a word after the binary's name in code: a command
// unless the name is kubectl's namespace (-n tablestore).
var commandWordRe = regexp.MustCompile(`(^|-n |[\s'"(/])(?:tablestore|\$B)\s+([a-z][a-z0-9-]*)`)

// docCode returns the code of the operator docs: fenced lines and code
// spans, with placeholders (<addr>) replaced by a word.
func docCode(t *testing.T) []docLine {
	t.Helper()
	var out []docLine
	for _, l := range allDocLines(t) {
		if l.fenced {
			l.text = placeholderRe.ReplaceAllString(l.text, "X")
			out = append(out, l)
			continue
		}
		for _, m := range codeSpanRe.FindAllStringSubmatch(l.text, -1) {
			out = append(out, docLine{where: l.where, text: placeholderRe.ReplaceAllString(m[1], "X"), section: l.section})
		}
	}
	return out
}

// TestDocsCommands: every `tablestore COMMAND` and `ctl COMMAND` in the
// operator docs' code names a command the binary has (a ctl master
// command one of its verbs).
func TestDocsCommands(t *testing.T) {
	synopses := ctl.Synopses()
	var verbs []string
	for _, v := range strings.Split(synopses["master"], " | ") {
		verbs = append(verbs, strings.Fields(v)[0])
	}
	n := 0
	for _, l := range docCode(t) {
		for _, m := range commandWordRe.FindAllStringSubmatch(l.text, -1) {
			if _, ok := commands[m[2]]; !ok && m[1] != "-n " && m[2] != "help" {
				t.Errorf("%s: tablestore has no command %q (%s)", l.where, m[2], l.text)
			}
		}
		for _, m := range invocationRe.FindAllStringSubmatchIndex(l.text, -1) {
			if isCtl := m[4] >= 0 || m[2] >= 0 && l.text[m[2]:m[3]] == "ctl"; !isCtl || !isInvocation(l.text, m) {
				continue
			}
			words := strings.Fields(l.text[m[1]:])
			cmd, i := ctlCommandAt(words, synopses)
			switch {
			case cmd == "" && i < len(words) && words[i] != "help" && !strings.HasPrefix(words[i], "["):
				t.Errorf("%s: ctl has no command %q (%s)", l.where, words[i], l.text)
			case cmd == "master" && i+1 < len(words) && !slices.Contains(verbs, words[i+1]):
				t.Errorf("%s: ctl master takes %v (%s)", l.where, verbs, l.text)
			case cmd != "":
				n++
			}
		}
	}
	if n < 40 {
		t.Errorf("found %d ctl commands in the docs, expected more (did the extraction break?)", n)
	}
}

// codeSpans returns the contents of text's code spans, sorted.
func codeSpans(text string) []string {
	var out []string
	for _, m := range codeSpanRe.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	sort.Strings(out)
	return out
}

// TestDocsChoices: the values operations.md gives loadgen's --scenario
// (its flag row and its Scenarios table) and sim's --workload are those
// the code accepts.
func TestDocsChoices(t *testing.T) {
	want := map[string][]string{
		"loadgen --scenario": slices.Sorted(slices.Values(loadgen.Scenarios)),
		"sim --workload":     slices.Sorted(slices.Values(sim.Workloads)),
	}
	tables := flagTables(t)
	for key, values := range want {
		command, name, _ := strings.Cut(key, " --")
		for _, r := range tables[command] {
			if r.name == name && !slices.Equal(codeSpans(r.what), values) {
				t.Errorf("%s: %s: docs name %v, the code takes %v", r.where, key, codeSpans(r.what), values)
			}
		}
	}
	var scenarios []string
	inTable := false
	for _, l := range readDoc(t, "../../docs/operations.md") {
		switch {
		case strings.HasPrefix(l.text, "| `--scenario` | PartitionKeys |"):
			inTable = true
		case !strings.HasPrefix(l.text, "|"):
			inTable = false
		case inTable && !strings.HasPrefix(l.text, "|---"):
			scenarios = append(scenarios, codeSpans(splitRow(l.text)[0])...)
		}
	}
	if sort.Strings(scenarios); !slices.Equal(scenarios, want["loadgen --scenario"]) {
		t.Errorf("operations.md's Scenarios table lists %v, loadgen has %v", scenarios, want["loadgen --scenario"])
	}
}

// portRoles are the commands of deploy.md's Ports table's role column.
var portRoles = map[string][]string{
	"master": {"master"}, "partition server": {"partitionserver"}, "front-end": {"frontend"},
	"every role": {"master", "partitionserver", "frontend"},
}

// TestDocsPorts: each flag of deploy.md's Ports table is one of the role
// the row names, and the port is that flag's default port (or "off" for an
// empty default) where the default names one.
func TestDocsPorts(t *testing.T) {
	sets := commandFlagSets(t)
	n := 0
	for _, l := range readDoc(t, "../../docs/deploy.md") {
		cells := splitRow(l.text)
		if l.section != "Ports" || !strings.HasPrefix(l.text, "| ") || len(cells) != 4 || cells[0] == "port" {
			continue
		}
		roles, ok := portRoles[cells[1]]
		if !ok {
			t.Errorf("%s: role %q is none of %v", l.where, cells[1], slices.Sorted(maps.Keys(portRoles)))
		}
		flags := flagMentions(cells[2])
		for _, role := range roles {
			for i, name := range flags {
				f := sets[role].Lookup(name)
				if f == nil {
					t.Errorf("%s: tablestore %s has no flag --%s", l.where, role, name)
					continue
				}
				_, port, _ := strings.Cut(f.DefValue, ":")
				if i == 0 && (port != "" && port != cells[0] || cells[0] == "off" && f.DefValue != "") {
					t.Errorf("%s: port %s, but %s --%s defaults to %q", l.where, cells[0], role, name, f.DefValue)
				}
				n++
			}
		}
	}
	if n < 7 {
		t.Errorf("checked %d flags of the Ports table, expected more (did the extraction break?)", n)
	}
}
