package main

import (
	"bytes"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// procSet starts processes of the real binary and stops them (SIGTERM,
// then SIGKILL after 10 s) when the test ends, printing their output if it
// failed.
type procSet struct {
	t     *testing.T
	bin   string
	procs []*proc
}

func newProcSet(t *testing.T, bin string) *procSet {
	ps := &procSet{t: t, bin: bin}
	t.Cleanup(ps.stop)
	return ps
}

func (ps *procSet) start(name string, args ...string) *proc {
	ps.t.Helper()
	out := &bytes.Buffer{}
	cmd := exec.Command(ps.bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		ps.t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, out: out}
	ps.procs = append(ps.procs, p)
	return p
}

func (ps *procSet) stop() {
	for _, pr := range ps.procs {
		pr.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, pr := range ps.procs {
		done := make(chan struct{})
		go func() { pr.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			pr.cmd.Process.Kill()
			<-done
		}
		if ps.t.Failed() {
			ps.t.Logf("--- %s output:\n%s", pr.name, pr.out.String())
		}
	}
}
