package ctl

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// operationsDoc returns the ctl section of docs/operations.md.
func operationsDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "## ctl (`tablestore ctl`)")
	if i < 0 {
		t.Fatal("docs/operations.md has no ctl section")
	}
	s = s[i:]
	if j := strings.Index(s[1:], "\n## "); j >= 0 {
		s = s[:j+1]
	}
	return s
}

// jsonFields lists the JSON names of v's fields, in order.
func jsonFields(v any) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// TestDocsJSONSchema: the JSON section of docs/operations.md documents every
// command's output, field by field as the record types encode them, and
// every event kind there is.
func TestDocsJSONSchema(t *testing.T) {
	doc := operationsDoc(t)
	_, js, ok := strings.Cut(doc, "### JSON output")
	if !ok {
		t.Fatal("no JSON output section")
	}
	js, _, _ = strings.Cut(js, "\n### ")
	// Each block: a bold heading naming commands in backticks, then
	// optionally a table whose first column is the field.
	heading := regexp.MustCompile("(?m)^\\*\\*(.+?)\\*\\*")
	locs := heading.FindAllStringSubmatchIndex(js, -1)
	types := map[string]any{"ranges": Range{}, "servers": Server{}, "events": Event{}, "split": Result{}, "master": Member{}, "frontends": Frontend{}, "debug": ZipResult{}, "ungroup-tables": UngroupResult{}}
	documented := map[string]bool{}
	for i, loc := range locs {
		end := len(js)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		block := js[loc[1]:end]
		var names []string
		for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(js[loc[2]:loc[3]], -1) {
			names = append(names, m[1])
			documented[m[1]] = true
		}
		var fields []string
		for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(block, -1) {
			fields = append(fields, m[1])
		}
		for _, n := range names {
			v, ok := types[n]
			if !ok {
				continue
			}
			if want := jsonFields(v); !slices.Equal(fields, want) {
				t.Errorf("%s: docs list fields %v, the output has %v", n, fields, want)
			}
		}
	}
	for _, c := range commands {
		if !documented[c.name] {
			t.Errorf("command %s: its JSON output is not documented", c.name)
		}
	}
	// The kind row names every kind the master logs.
	row := regexp.MustCompile("(?m)^\\| `kind` \\|.*$").FindString(js)
	for v, name := range pb.EventKind_name {
		if v == 0 {
			continue
		}
		kind := pb.EventKind(v).Name()
		if !strings.Contains(row, "`"+kind+"`") {
			t.Errorf("event kind %s (%s) missing from the docs' kind row", kind, name)
		}
	}
}

// TestDocsCommands: the commands table lists every command with the
// synopsis `ctl help` prints, and nothing else.
func TestDocsCommands(t *testing.T) {
	doc := operationsDoc(t)
	_, tbl, _ := strings.Cut(doc, "### Commands")
	tbl, _, _ = strings.Cut(strings.TrimLeft(tbl, "\n"), "\n\n")
	rows := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(tbl, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[1])
	}
	var want []string
	for _, c := range commands {
		if c.name == "master" {
			for _, v := range strings.Split(c.args, " | ") {
				want = append(want, "master "+v)
			}
			continue
		}
		want = append(want, strings.TrimSpace(c.name+" "+c.args))
	}
	if !slices.Equal(got, want) {
		t.Errorf("docs' commands table:\n%q\nctl's synopses:\n%q", got, want)
	}
}
