//go:build !race

package grouptransport

const raceEnabled = false
