//go:build unix

// Command serialexec runs one test binary at a time: `make test` passes it
// to go test as -exec with -p 2, so go test builds and links the next
// package's test binary while the current one runs (with -p 1 every
// package's build waited for the previous package's tests), and no two
// test binaries run side by side (several start whole clusters with real
// Raft timeouts, which two at once on two cores would starve).
//
// Usage: serialexec binary [args...]. The lock is the file named by
// $TABLESTORE_TEST_LOCK (created if missing); without it the binary runs
// at once. The lock's descriptor is close-on-exec, so processes the tests
// start do not hold it; signals are passed on to the binary (go test's
// SIGQUIT at its timeout reaches the tests), and the binary's exit status
// is this command's.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: serialexec binary [args...]")
		os.Exit(2)
	}
	if path := os.Getenv("TABLESTORE_TEST_LOCK"); path != "" {
		// Held until this process exits, after the binary.
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "serialexec:", err)
			os.Exit(2)
		}
		for {
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
			if !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "serialexec: lock", path+":", err)
			os.Exit(2)
		}
	}
	os.Exit(run(os.Args[1], os.Args[2:]))
}

// run runs binary with args, passing on the signals this process gets, and
// returns its exit code (128 + the signal's number when a signal ended it,
// as a shell reports it).
func run(binary string, args []string) int {
	cmd := exec.Command(binary, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGHUP)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "serialexec:", err)
		return 2
	}
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "serialexec:", err)
		return 2
	}
	return 0
}
