package chaos

import (
	"errors"
	"strings"
	"testing"
	"time"

	pb "tablestore/proto/tablestorepb"
)

func TestJudgeTable(t *testing.T) {
	rows := func(acked, unk string) map[string]outcome {
		m := map[string]outcome{}
		for _, k := range strings.Fields(acked) {
			m[k] = applied
		}
		for _, k := range strings.Fields(unk) {
			m[k] = unknown
		}
		return m
	}
	keys := func(ks ...string) map[string]int {
		m := map[string]int{}
		for _, k := range ks {
			m[k]++
		}
		return m
	}
	live := &smallTable{name: "a", created: applied, rows: rows("p0/r0 p1/r1", "p0/r2")}
	deleted := &smallTable{name: "d", created: applied, deleteTried: true, deleted: applied, deletedAt: time.Now(), rows: rows("p0/r0", "")}
	maybeDeleted := &smallTable{name: "m", created: applied, deleteTried: true, deleted: unknown, rows: rows("p0/r0", "")}
	maybeCreated := &smallTable{name: "u", created: unknown, rows: rows("", "")}
	there := func(ks ...string) tableState {
		return tableState{exists: true, listed: true, inMap: true, ranges: 1, keys: keys(ks...)}
	}
	for _, tc := range []struct {
		name  string
		t     *smallTable
		st    tableState
		want  []string // substrings, one per finding
		count func(tableFindings) int
	}{
		{"live, acked rows once, unknown absent", live, there("p0/r0", "p1/r1"), nil, nil},
		{"live, unknown row present", live, there("p0/r0", "p1/r1", "p0/r2"), nil, nil},
		{"live, acked row lost", live, there("p0/r0"), []string{"acknowledged p1/r1 lost"}, func(f tableFindings) int { return f.RowsLost }},
		{"live, row twice", live, there("p0/r0", "p1/r1", "p1/r1"), []string{"p1/r1 seen 2 times"}, func(f tableFindings) int { return f.RowsDuplicated }},
		{"live, row never written", live, there("p0/r0", "p1/r1", "p9/x"), []string{"p9/x was never written"}, func(f tableFindings) int { return f.RowsWrong }},
		{"live, wrong value", live, func() tableState { s := there("p0/r0", "p1/r1"); s.wrongVal = []string{"p0/r0 V=1"}; return s }(), []string{"wrong value"}, func(f tableFindings) int { return f.RowsWrong }},
		{"live table gone", live, tableState{}, []string{"not found"}, func(f tableFindings) int { return f.TablesLost }},
		{"deleted and gone", deleted, tableState{}, nil, nil},
		{"deleted, resurrected", deleted, there("p0/r0"), []string{"answers with 1 entities"}, func(f tableFindings) int { return f.Resurrected }},
		{"delete unknown, gone", maybeDeleted, tableState{}, nil, func(f tableFindings) int { return f.UnknownGone }},
		{"delete unknown, there with its rows", maybeDeleted, there("p0/r0"), nil, func(f tableFindings) int { return f.UnknownThere }},
		{"delete unknown, there without its acked row", maybeDeleted, there(), []string{"acknowledged p0/r0 lost"}, func(f tableFindings) int { return f.RowsLost }},
		{"create unknown, absent", maybeCreated, tableState{}, nil, func(f tableFindings) int { return f.UnknownGone }},
		{"create unknown, there and empty", maybeCreated, there(), nil, func(f tableFindings) int { return f.UnknownThere }},
		{"gone but in the map", deleted, tableState{inMap: true, ranges: 1}, []string{"the map has it true with 1 ranges"}, func(f tableFindings) int { return f.Inconsistent }},
		{"there but not listed", live, tableState{exists: true, inMap: true, ranges: 1, keys: keys("p0/r0", "p1/r1")}, []string{"Query Tables listed it false"}, func(f tableFindings) int { return f.Inconsistent }},
		{"no answer", live, tableState{err: errors.New("503")}, []string{"no answer: 503"}, func(f tableFindings) int { return f.Unread }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f tableFindings
			got := judgeTable(tc.t, tc.st, &f)
			if len(got) != len(tc.want) {
				t.Fatalf("findings %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %q, want it to say %q", got[i], w)
				}
			}
			if tc.count != nil && tc.count(f) != 1 {
				t.Errorf("counted %+v, want the finding counted once", f)
			}
		})
	}
}

func TestLastRound(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failFirst int // rounds that find something before one that does not
		limit     time.Duration
		findings  int
		lost      int
	}{
		{"passes at once", 0, time.Second, 0, 0},
		{"passes on the third round", 2, time.Second, 0, 0},
		{"never passes", 1000, 30 * time.Millisecond, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rounds := 0
			round, findings := lastRound(tc.limit, time.Millisecond, func(f *tableFindings) []string {
				rounds++
				f.UnknownGone++ // counted in every round
				if rounds <= tc.failFirst {
					f.RowsLost++
					return []string{"lost"}
				}
				return nil
			})
			if len(findings) != tc.findings || round.RowsLost != tc.lost || round.UnknownGone != 1 {
				t.Errorf("after %d rounds: findings %q, counts %+v; want %d findings, %d lost, the last round's 1 unknown", rounds, findings, round, tc.findings, tc.lost)
			}
		})
	}
}

func TestGroupHistogram(t *testing.T) {
	rd := func(id, group uint64, table string) *pb.RangeDescriptor {
		return &pb.RangeDescriptor{RangeId: id, GroupId: group, Table: table}
	}
	pm := &pb.PartitionMap{Ranges: []*pb.RangeDescriptor{
		rd(1, 0, "_groups/1"), rd(2, 1, "chaos"), rd(3, 1, "a"), rd(4, 1, "b"),
		rd(5, 0, "c"), rd(6, 0, "d"), rd(7, 6, "d"),
		rd(8, 0, "_groups/8"), rd(9, 8, "e"),
	}}
	if got, want := groupHistogram(tablesByGroup(pm)), "1x2 3x1"; got != want {
		t.Errorf("groupHistogram = %q, want %q", got, want)
	}
}
