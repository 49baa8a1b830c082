package lifecycle

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestScripts runs every testdata/*.txt script and compares the transcript
// with its .golden file. A script line is a machine command:
//
//	machine                  start a new replica (Absent)
//	<event> [campaign] [must-open] [followed] [broken]
//	answer term=T prev=I,T commit=C entries=N [first=I last=I,T plain] mark=T,I,T,A
//	vote term=T last=I,T [voter] mark=T,I,T,A
//	assigned gen=G [hosted] [started] [stored] [parent] [parent-quiet]
//
// Lines starting with # and blank lines are copied.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			got := run(t, f)
			golden := strings.TrimSuffix(f, ".txt") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s:\n%s", f, golden, got)
			}
		})
	}
}

func run(t *testing.T, path string) string {
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var out strings.Builder
	var m Machine
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		out.WriteString(sc.Text() + "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		switch fields[0] {
		case "machine":
			m = Machine{}
			fmt.Fprintf(&out, "  = %s\n", m.State())
		case "answer":
			fmt.Fprintf(&out, "  = %s\n", answerLine(t, fields[1:]))
		case "prevote":
			fmt.Fprintf(&out, "  = %s\n", preVoteLine(t, fields[1:]))
		case "vote":
			fmt.Fprintf(&out, "  = %s\n", voteLine(t, fields[1:]))
		case "assigned":
			fmt.Fprintf(&out, "  = %s\n", assignedLine(t, fields[1:]))
		default:
			ev, ok := ParseEvent(fields[0])
			if !ok {
				t.Fatalf("%s: unknown event %q", path, fields[0])
			}
			in := Input{Event: ev}
			for _, f := range fields[1:] {
				switch f {
				case "campaign":
					in.Campaign = true
				case "must-open":
					in.MustOpen = true
				case "followed":
					in.Followed = true
				case "broken":
					in.Broken = true
				default:
					t.Fatalf("%s: unknown flag %q", path, f)
				}
			}
			fmt.Fprintf(&out, "  = %s\n", m.Step(in))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// preVoteLine parses "prevote candidate-last=N mark=term,last,lastterm,applied".
func preVoteLine(t *testing.T, args []string) string {
	var m Mark
	var last uint64
	for _, arg := range args {
		k, v, _ := strings.Cut(arg, "=")
		n := numbers(t, v)
		switch k {
		case "candidate-last":
			last = n[0]
		case "mark":
			m = Mark{Term: n[0], LastIndex: n[1], LastTerm: n[2], Applied: n[3]}
		default:
			t.Fatalf("unknown prevote field %q", k)
		}
	}
	return replyName(AnswerPreVote(m, last))
}

func answerLine(t *testing.T, args []string) string {
	var m Mark
	var a Append
	for _, arg := range args {
		if arg == "plain" {
			a.Plain = true
			continue
		}
		k, v, _ := strings.Cut(arg, "=")
		n := numbers(t, v)
		switch k {
		case "first":
			a.First = n[0]
		case "last":
			a.Last, a.LastTerm = n[0], n[1]
		case "term":
			a.Term = n[0]
		case "prev":
			a.PrevLogEntry, a.PrevLogTerm = n[0], n[1]
		case "commit":
			a.LeaderCommit = n[0]
		case "entries":
			a.Entries = int(n[0])
		case "mark":
			m = Mark{Term: n[0], LastIndex: n[1], LastTerm: n[2], Applied: n[3]}
		default:
			t.Fatalf("unknown answer field %q", k)
		}
	}
	return replyName(Answer(m, a))
}

// voteLine parses "vote term=T last=I,T [voter] mark=T,I,T,A".
func voteLine(t *testing.T, args []string) string {
	var m Mark
	var v Vote
	for _, arg := range args {
		if arg == "voter" {
			v.Voter = true
			continue
		}
		k, val, _ := strings.Cut(arg, "=")
		n := numbers(t, val)
		switch k {
		case "term":
			v.Term = n[0]
		case "last":
			v.LastLogIndex, v.LastLogTerm = n[0], n[1]
		case "mark":
			m = Mark{Term: n[0], LastIndex: n[1], LastTerm: n[2], Applied: n[3]}
		default:
			t.Fatalf("unknown vote field %q", k)
		}
	}
	return replyName(AnswerVote(m, v))
}

// numbers parses a comma-separated list of numbers ("5,42,5,42").
func numbers(t *testing.T, s string) []uint64 {
	var out []uint64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			t.Fatalf("bad number %q", p)
		}
		out = append(out, v)
	}
	return out
}

func replyName(r Reply) string {
	return map[Reply]string{Wake: "wake", Ack: "ack", Deny: "deny", Grant: "grant", Store: "store"}[r]
}

// assignedLine parses "assigned gen=G [hosted] [started] [stored] [stranded] [parent] [parent-quiet]
// [of-group] [group-hosted] [group-quiet]".
func assignedLine(t *testing.T, args []string) string {
	var a Assignment
	for _, arg := range args {
		switch k, v, _ := strings.Cut(arg, "="); k {
		case "gen":
			g, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("bad generation %q", v)
			}
			a.Generation = g
		case "hosted":
			a.Hosted = true
		case "started":
			a.Started = true
		case "stored":
			a.Stored = true
		case "stranded":
			a.Stored, a.Stranded = true, true
		case "parent":
			a.Parent = true
		case "parent-quiet":
			a.Parent, a.ParentQuiet = true, true
		case "of-group":
			a.OfGroup = true
		case "group-hosted":
			a.OfGroup, a.GroupHosted = true, true
		case "group-quiet":
			a.OfGroup, a.GroupHosted, a.GroupQuiet = true, true, true
		default:
			t.Fatalf("unknown assigned field %q", k)
		}
	}
	return Assigned(a).String()
}
