package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	seeds     = flag.Int("chaos.seeds", 0, "seeds to run in TestChaos (0: skip it)")
	firstSeed = flag.Int64("chaos.first-seed", 1, "first seed of TestChaos")
	duration  = flag.Duration("chaos.duration", 45*time.Second, "fault phase of each seed")
	reshapes  = flag.Int("chaos.reshapes", 1, "reshaping operations (split, merge, move, leadership transfer) asked for with each fault")
	tables    = flag.Int("chaos.tables", 0, "small tables the tables workload keeps live, created, written and deleted beside the faults (0: no tables workload)")
	keepDir   = flag.String("chaos.dir", "", "keep data and process logs of failed seeds, and of seeds over the write-gap target, under this directory")
)

// buildBinary builds the tablestore binary once per test binary run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tablestore")
	cmd := exec.Command("go", "build", "-o", bin, "tablestore/cmd/tablestore")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func runSeed(t *testing.T, bin string, seed int64, d time.Duration) *Result {
	t.Helper()
	dir := t.TempDir()
	if *keepDir != "" {
		dir = filepath.Join(*keepDir, fmt.Sprintf("seed-%d", seed))
		os.RemoveAll(dir)
	}
	res, err := Run(Options{Seed: seed, Binary: bin, Dir: dir, Duration: d, Logf: t.Logf, Reshapes: *reshapes, Tables: *tables})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if _, explore := forcedClockOffset(); !res.KeepLogs() && !explore && *keepDir != "" {
		os.RemoveAll(dir)
	}
	return res
}

// TestChaosSmoke runs one short seed: the harness and the cluster under
// every kind of fault, in about a minute.
func TestChaosSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process chaos run")
	}
	bin := buildBinary(t)
	res := runSeed(t, bin, 1, 25*time.Second)
	t.Log("\n" + Summary([]*Result{res}))
	if !res.OK() {
		t.Fatalf("seed 1: %v", res.Problems)
	}
}

// TestChaos runs -chaos.seeds seeds (make chaos SEEDS=N) and summarizes.
func TestChaos(t *testing.T) {
	if *seeds <= 0 {
		t.Skip("set -chaos.seeds (make chaos SEEDS=N)")
	}
	bin := buildBinary(t)
	var results []*Result
	for s := *firstSeed; s < *firstSeed+int64(*seeds); s++ {
		res := runSeed(t, bin, s, *duration)
		results = append(results, res)
		fmt.Printf("seed %d: faults %s\n", s, strings.Join(res.Faults, ", "))
		fmt.Print(Summary([]*Result{res}))
	}
	sum := Summary(results)
	fmt.Print("\n" + sum)
	for _, r := range results {
		if !r.OK() {
			t.Errorf("seed %d: %v", r.Seed, r.Problems)
		}
	}
}
