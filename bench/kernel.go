package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Kernel work per operation.
//
// On a small shared machine much of what an operation costs is the
// kernel's: a context switch for every hand-off between processes or
// threads, a read or write system call for every message, page and log
// write. CPU time counts it but does not say which; these two counts do,
// per role, aligned with the scenario's window like the CPU figures
// (docs/performance.md, session 15).

// kernelSample is what the kernel counted of one process so far.
type kernelSample struct {
	// switches is the context switches of its live threads (voluntary
	// and not; a thread that exited takes its count with it, and Go's
	// threads seldom exit).
	switches float64
	// syscalls is its read- and write-class system calls (read, write,
	// pread, pwrite, readv, writev, send, recv, …: /proc/PID/io syscr +
	// syscw), all threads', exited ones included. Not counted: futex,
	// epoll, nanosleep, fsync.
	syscalls float64
}

// kernelSnapshot is every started process's kernelSample plus this
// process's own ("client").
type kernelSnapshot map[string]kernelSample

func (t *target) kernel() kernelSnapshot {
	s := kernelSnapshot{"client": sampleKernel(os.Getpid())}
	for _, p := range t.procs {
		s[p.role] = sampleKernel(p.cmd.Process.Pid)
	}
	return s
}

// sampleKernel reads pid's counters; a missing file (the process ended,
// or a kernel without task I/O accounting) counts 0.
func sampleKernel(pid int) kernelSample {
	var k kernelSample
	if f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid)); err == nil {
		k.syscalls = sumFields(f, "syscr:", "syscw:")
		f.Close()
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, path := range tasks {
		if f, err := os.Open(path); err == nil {
			k.switches += sumFields(f, "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
			f.Close()
		}
	}
	return k
}

// sumFields adds up the numbers of the lines of r that start with one of
// keys ("key: value" or "key:\tvalue", as /proc writes them).
func sumFields(r io.Reader, keys ...string) float64 {
	var sum float64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		for _, k := range keys {
			if v, ok := strings.CutPrefix(line, k); ok {
				n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err == nil {
					sum += n
				}
			}
		}
	}
	return sum
}

// perOp turns two snapshots into counts per entity: by role, plus
// "servers" (every role but the client).
func perOp(before, after kernelSnapshot, n int64, pick func(kernelSample) float64) map[string]float64 {
	m := map[string]float64{}
	var servers float64
	for role, a := range after {
		v := (pick(a) - pick(before[role])) / float64(n)
		m[role] = v
		if role != "client" {
			servers += v
		}
	}
	m["servers"] = servers
	return m
}

// kernelLine prints per-entity counts as cpuLine prints CPU, with one
// decimal.
func kernelLine(m map[string]float64) string {
	return roleLine(m, "%.1f")
}
