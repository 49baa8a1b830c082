//go:build !race

package edm

const raceEnabled = false
