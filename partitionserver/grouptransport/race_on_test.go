//go:build race

package grouptransport

// The race detector slows everything several times over; timing bounds
// are not checked under it.
const raceEnabled = true
