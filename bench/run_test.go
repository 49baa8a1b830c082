package main

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

// The window counts the calls that end inside it, and its length is the
// window's: a slow worker's last call, ending after the window, neither
// adds its entity nor stretches the time the fast worker's calls are
// divided by. Worker 0's calls take ~10 ms, worker 1's 700 ms; the rate
// is worker 0's ~100/s plus worker 1's 1.4/s. Measured up to the slow
// call's end instead (the bench before 2026-11-27: here 0.6 s after the
// fast worker stopped), it comes out over a third low.
func TestRunCountsTheWindowOnly(t *testing.T) {
	var mu sync.Mutex
	var fastCalls int
	var fastTime time.Duration
	op := func(w, i int) (int, error) {
		if w == 1 {
			time.Sleep(700 * time.Millisecond)
			return 1, nil
		}
		t0 := time.Now()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		fastCalls++
		fastTime += time.Since(t0)
		mu.Unlock()
		return 1, nil
	}
	r := run(&target{name: "fake"}, "window", 2, 500*time.Millisecond, time.Second, 0, op)
	mu.Lock()
	want := float64(fastCalls)/fastTime.Seconds() + 1/0.7
	mu.Unlock()
	if math.Abs(r.Rate-want)/want > 0.08 {
		t.Errorf("rate %.1f/s, want %.1f/s within 8 %%", r.Rate, want)
	}
	if r.Errors != 0 || r.WarmupErrors != 0 {
		t.Errorf("errors %d, warm-up errors %d; want none", r.Errors, r.WarmupErrors)
	}
}

// Failures during the warm-up are the warm-up's, not the window's.
func TestRunWarmupErrorsApart(t *testing.T) {
	start := time.Now()
	op := func(w, i int) (int, error) {
		time.Sleep(5 * time.Millisecond)
		if time.Since(start) < 100*time.Millisecond {
			return 0, errors.New("cold")
		}
		return 1, nil
	}
	r := run(&target{name: "fake"}, "warm", 1, 300*time.Millisecond, 200*time.Millisecond, 0, op)
	if r.Errors != 0 || r.WarmupErrors == 0 || r.Rate == 0 {
		t.Errorf("errors %d, warm-up errors %d, rate %.0f/s; want 0, some, some", r.Errors, r.WarmupErrors, r.Rate)
	}
}
