// Package diskspace reports the free and total space of the file system
// holding a directory (a role's data directory, for its gauges and the
// partition server's write reserve).
package diskspace
