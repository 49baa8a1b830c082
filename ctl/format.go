package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// table renders aligned columns separated by two spaces; numbers are
// right-aligned so magnitudes line up.
type table struct {
	titles []string
	right  []bool
	rows   [][]string
}

func newTable(cols ...string) *table {
	t := &table{}
	for _, c := range cols {
		// A leading '>' marks a right-aligned column.
		if r, ok := strings.CutPrefix(c, ">"); ok {
			t.titles, t.right = append(t.titles, r), append(t.right, true)
		} else {
			t.titles, t.right = append(t.titles, c), append(t.right, false)
		}
	}
	return t
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	width := make([]int, len(t.titles))
	for _, row := range append([][]string{t.titles}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, row := range append([][]string{t.titles}, t.rows...) {
		var line strings.Builder
		for i, c := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				line.WriteString(pad + c)
			} else {
				line.WriteString(c + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// showKey prints a PartitionKey bound for people: the open ends of a table
// as -inf/+inf, and any key that would be ambiguous or invisible (empty,
// spaces, control characters, or spelled like an open end) Go-quoted.
func showKey(k string, end bool) string {
	if k == "" {
		if end {
			return "+inf"
		}
		return "-inf"
	}
	return quoteIfNeeded(k)
}

func quoteIfNeeded(k string) string {
	if k == "" || k == "-inf" || k == "+inf" || strings.ContainsRune(k, '"') {
		return strconv.Quote(k)
	}
	for _, r := range k {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return strconv.Quote(k)
		}
	}
	return k
}

func rate(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// figure prints a decision figure compactly: whole numbers from 100 up, two
// decimals from 1, three significant digits below (a split taking 0.003 s
// must not print as 0).
func figure(f float64) string {
	var s string
	switch a := math.Abs(f); {
	case a >= 100 || f == math.Trunc(f):
		return strconv.FormatFloat(f, 'f', 0, 64)
	case a >= 1:
		s = strconv.FormatFloat(f, 'f', 2, 64)
	default:
		return strconv.FormatFloat(f, 'g', 3, 64)
	}
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + " B"
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit || u == "TiB" {
			return strconv.FormatFloat(f, 'f', 1, 64) + " " + u
		}
	}
	return ""
}

// diskFree is a server's free disk space of its file system's size, with
// the master's verdict when it is not ok ("-": no figures).
func diskFree(s Server) string {
	if s.Disk == "" {
		return "-"
	}
	out := humanBytes(s.DiskAvailableBytes) + " of " + humanBytes(s.DiskCapacityBytes)
	switch s.Disk {
	case "low":
		out += ", low"
	case "full":
		out += ", FULL"
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// maxHotKeys bounds the hot keys a human table shows per range; --json
// carries them all.
const maxHotKeys = 3

func hotKeys(ks []HotKey) string {
	var parts []string
	for i, k := range ks {
		if i == maxHotKeys {
			parts = append(parts, fmt.Sprintf("+%d more", len(ks)-maxHotKeys))
			break
		}
		parts = append(parts, quoteIfNeeded(k.PartitionKey)+"="+strconv.FormatFloat(k.EntitiesPerSec, 'f', 0, 64))
	}
	return orDash(strings.Join(parts, " "))
}

func writeRangesTable(w io.Writer, rs []Range) error {
	t := newTable("RANGE", "GROUP", ">SPANS", "TABLE", "START", "END", ">GEN", "REPLICAS", "LEADER", "STATE",
		">READS/S", ">WRITES/S", ">ENTITIES/S", ">THROTTLED/S", ">ENTITIES", ">SIZE", "HOT KEYS (entities/s)")
	for _, r := range rs {
		cells := []string{
			strconv.FormatUint(r.RangeID, 10), groupCell(r), strconv.Itoa(r.GroupSpans), r.Table, showKey(r.Start, false), showKey(r.End, true),
			strconv.FormatUint(r.Generation, 10), orDash(strings.Join(r.Replicas, ",")), orDash(r.Leader), orDash(r.State),
		}
		if r.LoadReported {
			cells = append(cells, rate(r.ReadsPerSec), rate(r.WritesPerSec), rate(r.EntitiesPerSec), rate(r.ThrottledPerSec),
				strconv.FormatUint(r.EntityCount, 10), humanBytes(r.Bytes), hotKeys(r.HotKeys))
		} else {
			// Unknown, not zero: the leader has not reported yet.
			cells = append(cells, "-", "-", "-", "-", "-", "-", "-")
		}
		t.add(cells...)
	}
	return t.write(w)
}

// groupCell is the GROUP column: the group's id, marked "anchor" on an
// anchor range (the reserved table founding a group tables share).
func groupCell(r Range) string {
	if r.Anchor {
		return strconv.FormatUint(r.Group, 10) + " anchor"
	}
	return strconv.FormatUint(r.Group, 10)
}

// writeDescriptorsTable shows ranges an operation returned: descriptors
// without load.
func writeDescriptorsTable(w io.Writer, rs []Range) error {
	t := newTable("RANGE", "GROUP", "TABLE", "START", "END", ">GEN", "REPLICAS")
	for _, r := range rs {
		t.add(strconv.FormatUint(r.RangeID, 10), strconv.FormatUint(r.Group, 10), r.Table, showKey(r.Start, false), showKey(r.End, true),
			strconv.FormatUint(r.Generation, 10), orDash(strings.Join(r.Replicas, ",")))
	}
	return t.write(w)
}

func writeServersTable(w io.Writer, ss []Server, now time.Time) error {
	t := newTable("SERVER", "GRPC ADDR", "RAFT ADDR", "ZONE", "ALIVE", ">LAST HEARTBEAT", ">REPLICAS", ">LEADERS", ">LED ENTITIES/S", "DISK FREE")
	for _, s := range ss {
		alive := "no"
		if s.Alive {
			alive = "yes"
		}
		if s.Draining {
			alive += ", draining"
		}
		if s.ClockSkewed {
			alive += ", clock off by " + time.Duration(s.ClockOffsetSeconds*float64(time.Second)).Round(time.Millisecond).String()
		}
		hb := "never"
		if s.LastHeartbeatUnixNano != 0 {
			age := max(0, now.Sub(time.Unix(0, s.LastHeartbeatUnixNano)))
			hb = age.Round(100*time.Millisecond).String() + " ago"
		}
		t.add(s.ServerID, orDash(s.GRPCAddr), orDash(s.RaftAddr), orDash(s.Zone), alive, hb,
			strconv.Itoa(s.Replicas), strconv.Itoa(s.Leaders), rate(s.LeaderEntitiesPerSec), diskFree(s))
	}
	return t.write(w)
}

// Events stream, so their table cannot be measured in advance: fixed widths
// that fit the usual values, the two free-form columns last.
const eventRowFormat = "%6s  %-27s  %-15s  %-12s  %-10s  %-12s  %8s  %-8s  %s  %s\n"

func writeEventHeader(w io.Writer) error {
	_, err := fmt.Fprintf(w, eventRowFormat, "SEQ", "TIME", "KIND", "TABLE", "RANGES", "SERVERS", "DURATION", "CAUSE", "FIGURES", "MESSAGE")
	return err
}

func writeEventRow(w io.Writer, e Event, loc *time.Location) error {
	when := "-"
	if e.UnixNano != 0 {
		// With its zone: an operator reading another machine's output, or
		// the dashboard's (which names the browser's zone), can tell.
		when = time.Unix(0, e.UnixNano).In(loc).Format("2006-01-02 15:04:05.000 MST")
	}
	ranges := make([]string, len(e.RangeIDs))
	for i, id := range e.RangeIDs {
		ranges[i] = strconv.FormatUint(id, 10)
	}
	dur := "-"
	if e.DurationSeconds != 0 {
		dur = strconv.FormatFloat(e.DurationSeconds, 'f', 3, 64) + "s"
	}
	names := make([]string, 0, len(e.Figures))
	for k := range e.Figures {
		names = append(names, k)
	}
	slices.Sort(names)
	figs := make([]string, len(names))
	for i, k := range names {
		figs[i] = k + "=" + figure(e.Figures[k])
	}
	line := fmt.Sprintf(eventRowFormat, strconv.FormatUint(e.Seq, 10), when, e.Kind, orDash(e.Table),
		orDash(strings.Join(ranges, ",")), orDash(strings.Join(e.Servers, ",")), dur, orDash(e.Cause),
		orDash(strings.Join(figs, " ")), e.Message)
	_, err := io.WriteString(w, strings.TrimRight(line, " \n")+"\n")
	return err
}

// jsonLines writes one compact JSON object per line. HTML escaping is off
// so keys with < > & stay readable.
type jsonLines struct{ enc *json.Encoder }

func newJSONLines(w io.Writer) *jsonLines {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &jsonLines{enc: enc}
}

func (j *jsonLines) write(v any) error { return j.enc.Encode(v) }
