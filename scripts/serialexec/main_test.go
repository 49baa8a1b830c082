//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain makes the test binary serve as both serialexec (with
// SERIALEXEC_MAIN=1) and the binary it runs (first argument "child": it
// appends "start" and, 300 ms later, "end" to a file, then exits with the
// given code).
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "child" {
		f, err := os.OpenFile(os.Args[2], os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			os.Exit(100)
		}
		f.WriteString("start\n")
		time.Sleep(300 * time.Millisecond)
		f.WriteString("end\n")
		f.Close()
		code, _ := strconv.Atoi(os.Args[3])
		os.Exit(code)
	}
	if os.Getenv("SERIALEXEC_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// serialexec starts this binary as serialexec running a child that logs
// to file and exits with code.
func serialexec(t *testing.T, lock, file string, code int) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, self, "child", file, strconv.Itoa(code))
	cmd.Env = append(os.Environ(), "SERIALEXEC_MAIN=1", "TABLESTORE_TEST_LOCK="+lock)
	return cmd
}

// TestOneAtATime: binaries started at once under the same lock run one
// after the other, and each one's exit code is serialexec's.
func TestOneAtATime(t *testing.T) {
	dir := t.TempDir()
	lock, file := filepath.Join(dir, "lock"), filepath.Join(dir, "log")
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		cmd := serialexec(t, lock, file, i)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ee *exec.ExitError
			if err := cmd.Wait(); errors.As(err, &ee) {
				codes[i] = ee.ExitCode()
			} else if err != nil {
				codes[i] = -1
			}
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != i {
			t.Errorf("serialexec of a binary exiting %d exited %d", i, c)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), strings.Repeat("start\nend\n", 3); got != want {
		t.Fatalf("the binaries' log:\n%s\nwant each to end before the next starts:\n%s", got, want)
	}
}
