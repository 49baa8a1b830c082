package raftlog

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

const crashChildEnv = "RAFTLOG_CRASH_CHILD_DIR"

// crashData is the content of entry idx of group g, so the parent can
// check what it reads back.
func crashData(g, idx uint64) string {
	return fmt.Sprintf("group %d entry %d %s", g, idx, strings.Repeat("z", int(idx%200)))
}

// TestCrashChild is the child process of TestKill9KeepsAckedEntries: it
// appends to several groups concurrently (so appends share group commits)
// and prints "group index" for every StoreLogs that returned. It compacts
// now and then so segments rotate and are collected under it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("child process of TestKill9KeepsAckedEntries")
	}
	s, err := Open(dir, Options{SegmentSize: 64 << 10})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var out sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	for g := uint64(1); g <= 6; g++ {
		go func() {
			l := s.Log(g)
			for idx := uint64(1); ; idx += 2 {
				batch := []*raft.Log{
					{Index: idx, Term: 1, Type: raft.LogCommand, Data: []byte(crashData(g, idx))},
					{Index: idx + 1, Term: 1, Type: raft.LogCommand, Data: []byte(crashData(g, idx+1))},
				}
				if err := l.StoreLogs(batch); err != nil {
					fmt.Println("store:", err)
					os.Exit(2)
				}
				if idx > 400 && idx%100 == 1 {
					if err := l.DeleteRange(1, idx-300); err != nil {
						fmt.Println("compact:", err)
						os.Exit(2)
					}
				}
				out.Lock()
				fmt.Fprintf(w, "%d %d\n", g, idx+1)
				w.Flush()
				out.Unlock()
			}
		}()
	}
	select {}
}

// TestKill9KeepsAckedEntries kills a process appending to the shared log
// with SIGKILL at random moments and checks that every append it saw
// acknowledged is there, with its data, after reopening; it repeats on the
// same directory so recovery itself is crashed into as well.
func TestKill9KeepsAckedEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := t.TempDir()
	acked := map[uint64]uint64{} // group -> highest acknowledged index
	for round := 0; round < 4; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// The kill comes a while after the first acknowledgement.
		var kill <-chan time.Time
		deadline := time.After(30 * time.Second)
		seen := 0
	read:
		for {
			select {
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				kill = nil
			case <-deadline:
				cmd.Process.Signal(syscall.SIGKILL)
				t.Fatalf("round %d: child acknowledged nothing in 30s", round)
			case line, ok := <-lines:
				if !ok {
					break read
				}
				var g, idx uint64
				if _, err := fmt.Sscanf(line, "%d %d", &g, &idx); err != nil {
					t.Fatalf("child: %s", line)
				}
				seen++
				if seen == 1 {
					kill = time.After(time.Duration(50+round*100) * time.Millisecond)
				}
				if idx > acked[g] {
					acked[g] = idx
				}
			}
		}
		cmd.Wait()
		if seen == 0 {
			t.Fatalf("round %d: child acknowledged nothing", round)
		}
		s, err := Open(dir, Options{SegmentSize: 64 << 10})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		for g, hi := range acked {
			l := s.Log(g)
			last, _ := l.LastIndex()
			if last < hi {
				t.Fatalf("round %d: group %d last index %d, acknowledged %d", round, g, last, hi)
			}
			first, _ := l.FirstIndex()
			for i := max(first, hi-300); i <= hi; i++ {
				var e raft.Log
				if err := l.GetLog(i, &e); err != nil {
					t.Fatalf("round %d: group %d entry %d: %v", round, g, i, err)
				}
				if string(e.Data) != crashData(g, i) {
					t.Fatalf("round %d: group %d entry %d holds %q", round, g, i, e.Data)
				}
			}
		}
		t.Logf("round %d: %d acks, %+v", round, seen, s.Stats())
		// The next child starts every group from index 1 again.
		for g := range acked {
			last, _ := s.Log(g).LastIndex()
			if err := s.Log(g).DeleteRange(1, last); err != nil {
				t.Fatal(err)
			}
			acked[g] = 0
		}
		s.Close()
	}
}
