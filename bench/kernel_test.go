package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSumFields(t *testing.T) {
	for _, c := range []struct {
		name, in string
		keys     []string
		want     float64
	}{
		{"io", "rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\nread_bytes: 0\n", []string{"syscr:", "syscw:"}, 7},
		{"status tabs", "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t5\n",
			[]string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}, 17},
		{"absent", "Name:\tx\n", []string{"syscr:"}, 0},
		{"garbage value", "syscr: many\nsyscw: 2\n", []string{"syscr:", "syscw:"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := sumFields(strings.NewReader(c.in), c.keys...); got != c.want {
				t.Errorf("sumFields = %v, want %v", got, c.want)
			}
		})
	}
}

// The counters move with what this process does: ten writes are ten
// write-class system calls at least, and sleeping switches a thread out.
func TestSampleKernelCountsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io:", err)
	}
	before := sampleKernel(os.Getpid())
	f, err := os.Create(filepath.Join(t.TempDir(), "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < 10; i++ {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		time.Sleep(10 * time.Millisecond)
		after := sampleKernel(os.Getpid())
		if after.syscalls-before.syscalls >= 10 && after.switches > before.switches {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters did not move: before %+v, after %+v", before, after)
		}
	}
}

func TestPerOp(t *testing.T) {
	before := kernelSnapshot{"client": {switches: 10, syscalls: 100}, "ps1": {switches: 5, syscalls: 50}, "frontend": {}}
	after := kernelSnapshot{"client": {switches: 30, syscalls: 300}, "ps1": {switches: 25, syscalls: 90}, "frontend": {switches: 40, syscalls: 60}}
	got := perOp(before, after, 10, func(k kernelSample) float64 { return k.switches })
	want := map[string]float64{"client": 2, "ps1": 2, "frontend": 4, "servers": 6}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("perOp[%q] = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if line := kernelLine(got); line != "6.0 (frontend 4.0, ps1 2.0); client 2.0" {
		t.Errorf("kernelLine = %q", line)
	}
}

func TestParseCPULine(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     machineSample
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"full", "cpu  100 2 30 500 40 0 8 1 7 1\n", machineSample{busy: 141, iowait: 40, idle: 500}},
		{"no iowait field", "cpu 10 0 5 85\n", machineSample{busy: 15, idle: 85}},
		{"short", "cpu 10 0 5\n", machineSample{}},
		{"not the total", "cpu0 100 2 30 500 40 0 8 1 0 0\n", machineSample{}},
		{"garbage", "cpu 1 x 3 4 5 6 7 8\n", machineSample{}},
		{"no steal field", "cpu 10 0 5 80 5 0 0\n", machineSample{busy: 15, iowait: 5, idle: 80}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := parseCPULine(c.in); got != c.want {
				t.Errorf("parseCPULine(%q) = %+v, want %+v", c.in, got, c.want)
			}
		})
	}
	busy, wait := machineShares(machineSample{busy: 100, iowait: 10, idle: 90}, machineSample{busy: 180, iowait: 20, idle: 100})
	if busy != 80 || wait != 10 {
		t.Errorf("machineShares = %v, %v; want 80, 10", busy, wait)
	}
	if b, w := machineShares(machineSample{}, machineSample{}); b != 0 || w != 0 {
		t.Errorf("machineShares of nothing = %v, %v", b, w)
	}
}

func TestStatCPUTicks(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
	// majflt cmajflt utime stime cutime cstime ...
	for _, c := range []struct {
		name, in string
		want     float64
	}{
		{"plain", "42 (node) S 1 42 42 0 -1 4194304 100 0 0 0 250 70 9000 9000 20 0 7 0\n", 320},
		{"name with spaces and a paren", "42 (a) b c) R 1 42 42 0 -1 0 1 2 3 4 11 5 600 600 20 0 1 0\n", 16},
		{"children's time not counted", "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 500 500 20 0 1 0\n", 0},
		{"short", "42 (node) S 1 42\n", 0},
		{"not a stat line", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := statCPUTicks(c.in); got != c.want {
				t.Errorf("statCPUTicks = %v, want %v", got, c.want)
			}
		})
	}
	// And the live one: this process's CPU time moves once it spins past
	// a clock tick.
	deadline := time.Now().Add(5 * time.Second)
	for x := 0; cpuSeconds(os.Getpid()) <= 0; x++ {
		if time.Now().After(deadline) {
			t.Fatal("cpuSeconds(self) stayed 0 over 5 s of spinning")
		}
		for i := 0; i < 1_000_000; i++ {
			x ^= i
		}
	}
}
