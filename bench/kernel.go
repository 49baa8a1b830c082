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
// per role, aligned with the scenario's window like the CPU figures, and
// the machine's busy share says whether the processors were the bound
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

func (t *target) kernel() kernelSnapshot { return perProcess(t, sampleKernel) }

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

// perOp turns two per-process snapshots (perProcess) into a figure per
// entity: pick of the difference, by role, plus "servers" (every role but
// the client).
func perOp[T any](before, after map[string]T, n int64, pick func(T) float64) map[string]float64 {
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

// machineSample is the machine's CPU time so far, from /proc/stat's first
// line (every CPU together), in USER_HZ ticks.
type machineSample struct {
	busy, iowait, idle float64
}

// sampleMachine reads /proc/stat; zero when it cannot.
func sampleMachine() machineSample {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return machineSample{}
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return machineSample{}
	}
	return parseCPULine(line)
}

// parseCPULine reads "cpu user nice system idle iowait irq softirq steal
// ...": idle and iowait apart, everything else busy (guest time is
// already in user).
func parseCPULine(line string) machineSample {
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return machineSample{}
	}
	var m machineSample
	for i, v := range f[1:] {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return machineSample{}
		}
		switch i {
		case 3:
			m.idle = n
		case 4:
			m.iowait = n
		case 8, 9: // guest, guest_nice: counted in user already
		default:
			m.busy += n
		}
	}
	return m
}

// machineShares is the machine's busy and iowait shares between two
// samples, in percent (0, 0 when nothing was counted).
func machineShares(before, after machineSample) (busy, iowait float64) {
	b, w, i := after.busy-before.busy, after.iowait-before.iowait, after.idle-before.idle
	total := b + w + i
	if total <= 0 {
		return 0, 0
	}
	return 100 * b / total, 100 * w / total
}
