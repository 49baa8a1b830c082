package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// dirImage is the content of every file of a log directory.
type dirImage map[string][]byte

func readImage(t *testing.T, dir string) dirImage {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	img := dirImage{}
	for _, de := range des {
		b, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		img[de.Name()] = b
	}
	return img
}

// names lists the image's files in order, so a seed always builds the same
// images.
func (img dirImage) names() []string {
	var names []string
	for name := range img {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// tear mixes a file's content before and after one write as a crash during
// it can leave it: each 512-byte sector is the old or the new one (bytes
// never written read as zeros), the size the old or the new.
func tear(rng *rand.Rand, before, after []byte) []byte {
	n := len(after)
	if len(before) != len(after) && rng.Intn(2) == 0 {
		n = len(before)
	}
	out := make([]byte, n)
	for off := 0; off < n; off += 512 {
		src := after
		if rng.Intn(2) == 0 {
			src = before
		}
		if off < len(src) {
			copy(out[off:min(off+512, n)], src[off:])
		}
	}
	return out
}

func copyModels(ms map[uint64]*model) map[uint64]*model {
	out := map[uint64]*model{}
	for id, m := range ms {
		c := &model{entries: map[uint64]string{}, kv: map[string]string{}}
		for k, v := range m.entries {
			c.entries[k] = v
		}
		for k, v := range m.kv {
			c.kv[k] = v
		}
		out[id] = c
	}
	return out
}

// differs says how s differs from models, or "" when it holds exactly
// their state.
func differs(s *Store, models map[uint64]*model) string {
	for id, m := range models {
		l := s.Log(id)
		lo, hi := m.bounds()
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		if first != lo || last != hi {
			return fmt.Sprintf("group %d: bounds [%d, %d], want [%d, %d]", id, first, last, lo, hi)
		}
		for i := lo; i <= hi && lo != 0; i++ {
			var e raft.Log
			if err := l.GetLog(i, &e); err != nil {
				return fmt.Sprintf("group %d entry %d: %v", id, i, err)
			}
			if string(e.Data) != m.entries[i] || e.Index != i || e.AppendedAt.UnixNano() != int64(i) {
				return fmt.Sprintf("group %d entry %d: %.20q (index %d), want %.20q", id, i, e.Data, e.Index, m.entries[i])
			}
		}
		for k, v := range m.kv {
			if got, err := l.Get([]byte(k)); err != nil || string(got) != v {
				return fmt.Sprintf("group %d key %s: %q, %v; want %q", id, k, got, err, v)
			}
		}
		if _, err := l.Get([]byte("absent")); !errors.Is(err, ErrKeyNotFound) || err.Error() != "not found" {
			return fmt.Sprintf("group %d absent key: %v", id, err)
		}
	}
	for _, id := range s.Groups() {
		if _, ok := models[id]; !ok {
			return fmt.Sprintf("group %d has state, want none", id)
		}
	}
	return ""
}

// liveMismatch compares each segment's count of live entries with the
// entries the index points into it (garbage collection trusts the count).
func liveMismatch(s *Store) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := map[uint64]int{}
	for id, g := range s.groups {
		for i, l := range g.locs {
			if _, ok := s.segs[l.seg]; !ok {
				return fmt.Sprintf("group %d entry %d in segment %d, which is gone", id, g.first+uint64(i), l.seg)
			}
			n[l.seg]++
		}
	}
	for id, seg := range s.segs {
		if seg.live != n[id] {
			return fmt.Sprintf("segment %d: live %d, the index points %d entries into it", id, seg.live, n[id])
		}
	}
	return ""
}

// TestCrashImages runs random operations of several groups on tiny
// segments (appends, appends after a gap, suffix truncations, prefix
// compactions, stable keys, votes, drops and re-creations) and, after
// each, opens the directories a crash during it could leave: the files it
// wrote torn sector by sector, a segment it created missing, the segments
// deleted since the directory was last synced back. Each must open to the
// state before the operation, after it, or after one of its records (a
// vote is three): nothing acknowledged lost, nothing deleted back.
func TestCrashImages(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			crashImages(t, seed, 200)
		})
	}
}

func crashImages(t *testing.T, seed int64, steps int) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 2 << 10}
	s := open(t, dir, opts)
	defer func() { s.Close() }()
	rng := rand.New(rand.NewSource(seed))
	models := map[uint64]*model{}
	// removed holds the segments deleted since the directory was last
	// synced (by a new segment's creation): a crash can bring them back.
	removed := dirImage{}
	before := readImage(t, dir)
	images := 0
	for step := 0; step < steps; step++ {
		// states are the models a crash during the operation may leave.
		states := []map[uint64]*model{copyModels(models)}
		id := uint64(rng.Intn(4) + 1)
		l := s.Log(id)
		m, ok := models[id]
		if !ok {
			m = &model{entries: map[uint64]string{}, kv: map[string]string{}}
		}
		lo, hi := m.bounds()
		var err error
		switch op := rng.Intn(22); {
		case op < 11:
			next := hi + 1
			if hi == 0 || rng.Intn(8) == 0 {
				// A gap (or the first entry) starts the log afresh.
				next += uint64(rng.Intn(3))
				if hi > 0 && next > hi+1 {
					clear(m.entries)
					models[id] = m
					states = append(states, copyModels(models))
				}
			}
			var batch []*raft.Log
			for n := rng.Intn(3) + 1; n > 0; n-- {
				d := fmt.Sprintf("g%d-%d-%d-%s", id, next, step, bytes.Repeat([]byte{'x'}, rng.Intn(200)))
				batch = append(batch, entry(next, uint64(step), d))
				m.entries[next] = d
				next++
			}
			err = l.StoreLogs(batch)
			models[id] = m
		case op < 14 && hi > 0:
			from := lo + uint64(rng.Int63n(int64(hi-lo+1)))
			err = l.DeleteRange(from, hi)
			for i := from; i <= hi; i++ {
				delete(m.entries, i)
			}
		case op < 17 && hi > 0:
			to := lo + uint64(rng.Int63n(int64(hi-lo+1)))
			err = l.DeleteRange(lo, to)
			for i := lo; i <= to; i++ {
				delete(m.entries, i)
			}
		case op < 19:
			k, v := fmt.Sprintf("k%d", rng.Intn(3)), fmt.Sprintf("v%d", step)
			err = l.Set([]byte(k), []byte(v))
			m.kv[k] = v
			models[id] = m
		case op < 21:
			term := binary.BigEndian.AppendUint64(nil, uint64(step))
			cand := fmt.Sprintf("c%d", step)
			err = l.SetVote(uint64(step), []byte(cand))
			models[id] = m
			m.kv["CurrentTerm"] = string(term)
			states = append(states, copyModels(models))
			m.kv["LastVoteCand"] = cand
			states = append(states, copyModels(models))
			m.kv["LastVoteTerm"] = string(term)
		default:
			if !ok {
				continue
			}
			err = l.Drop()
			delete(models, id)
		}
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, copyModels(models))
		if d := liveMismatch(s); d != "" {
			t.Fatalf("step %d: %s", step, d)
		}
		after := readImage(t, dir)
		removed = crashImage(t, rng, opts, fmt.Sprintf("step %d", step), before, after, removed, states)
		images++
		if step%50 == 49 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open(t, dir, opts)
			if d := differs(s, models); d != "" {
				t.Fatalf("step %d: after reopening: %s", step, d)
			}
			if d := liveMismatch(s); d != "" {
				t.Fatalf("step %d: after reopening: %s", step, d)
			}
			// A crash while opening: its new segment torn or missing,
			// what it deleted back.
			reopened := readImage(t, dir)
			removed = crashImage(t, rng, opts, fmt.Sprintf("opening after step %d", step), after, reopened, removed, []map[uint64]*model{models})
			images++
			after = reopened
		}
		before = after
	}
	t.Logf("%d crash images, %+v", images, s.Stats())
}

// crashImage opens one directory a crash during a write that took dir from
// before to after could leave, and checks that it holds one of states. It
// returns the segments deleted since the directory was last synced (a
// crash can bring them back), removed updated.
func crashImage(t *testing.T, rng *rand.Rand, opts Options, what string, before, after, removed dirImage, states []map[uint64]*model) dirImage {
	t.Helper()
	var gone []string
	for _, name := range before.names() {
		if _, ok := after[name]; !ok {
			gone = append(gone, name)
		}
	}
	// back are the segments a crash can bring back.
	back := dirImage{}
	for name, b := range removed {
		back[name] = b
	}
	for _, name := range after.names() {
		if _, ok := before[name]; !ok {
			// The write created a segment, syncing the directory, then
			// deleted what it let go.
			removed = dirImage{}
		}
	}
	for _, name := range gone {
		removed[name] = before[name]
		back[name] = before[name]
	}
	img := dirImage{}
	var how []string
	torn, synced := false, true
	for _, name := range after.names() {
		if _, ok := before[name]; !ok && rng.Intn(3) == 0 {
			how = append(how, name+" missing")
			torn, synced = true, false
			continue
		}
		img[name] = tear(rng, before[name], after[name])
		if !bytes.Equal(img[name], after[name]) {
			how = append(how, fmt.Sprintf("%s torn (%d to %d bytes)", name, len(before[name]), len(after[name])))
			torn = true
		}
	}
	if synced {
		back = removed
	}
	for _, name := range back.names() {
		if slices.Contains(gone, name) && torn {
			// Not durable yet, the write had deleted nothing.
			img[name] = back[name]
		} else if rng.Intn(2) == 0 {
			img[name] = back[name]
			how = append(how, name+" back")
		}
	}
	cdir := t.TempDir()
	for name, b := range img {
		if err := os.WriteFile(filepath.Join(cdir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(cdir, opts)
	if err != nil {
		t.Fatalf("%s: opening a crash image (%v): %v", what, how, err)
	}
	if d := liveMismatch(c); d != "" {
		t.Fatalf("%s: a crash image (%v) opened: %s", what, how, d)
	}
	var diffs []string
	for _, st := range states {
		diffs = append(diffs, differs(c, st))
	}
	c.Close()
	if !slices.Contains(diffs, "") {
		t.Fatalf("%s: a crash image (%v) holds none of the states the write can leave: %q", what, how, diffs)
	}
	return removed
}
