// Package durable makes file-system changes survive a crash: a new file's
// or directory's entry, a rename or a removal is durable only once the
// directory holding it is synced (POSIX promises nothing before; ext4 and
// XFS happen to order most of it, other file systems do not). The master
// and the partition servers create their data directories, identity files
// and per-range directories through it; the shared Raft log
// (partitionserver/raftlog) also syncs its own segments' directory.
package durable
