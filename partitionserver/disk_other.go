//go:build !unix

package partitionserver

// diskSpace is unknown off Unix; the disk gauges stay unset.
func diskSpace(string) (avail, capacity uint64, ok bool) { return 0, 0, false }
