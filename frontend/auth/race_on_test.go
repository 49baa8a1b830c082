//go:build race

package auth

// Under the race detector sync.Pool drops items at random, so allocation
// counts are not checked.
const raceEnabled = true
