//go:build !unix

package diskspace

// Of is unknown off Unix.
func Of(string) (avail, capacity uint64, ok bool) { return 0, 0, false }
