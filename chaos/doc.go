// Package chaos is a Jepsen-style fault-injection harness: it runs the
// roles as separate processes of the real binary, injects crashes, clean shutdowns, pauses,
// master-leader kills, network cuts, slow or failing disks and partition
// server clocks set ahead or behind (15 s, 90 s, or 5 min ahead: the
// clock its heartbeats report and its leaders stamp writes with, through
// the failpoint partitionserver/clock/offset), one at a time, each kind
// equally likely, drawn from a stream of the seed's own (run.go,
// chooseFault), while the official Azure SDK writes, reshapes the key space with
// `tablestore ctl`, then heals everything and checks that no acknowledged
// write was lost, duplicated or changed, that no counter increment was
// lost, that a sample of keys has a linearizable history, that every
// query scan (followed page by page through its continuations while the
// faults and reshapes run) returned each entity acknowledged before its
// page was asked (on the read-access secondary: before its LastSyncTime),
// once, in key order (scan.go), and that every range is led and fully
// replicated again. With -chaos.tables N (make chaos CHAOS_TABLES=N) a
// second workload keeps about N small tables live beside the big one,
// creating, writing and deleting them, and checks at the end that every
// acknowledged table and row is there once, that every table whose delete
// was acknowledged stayed gone, and that none of its ranges is left in the
// master's map or on a server (tables.go). `make chaos SEEDS=N` runs it;
// docs/reliability.md has the results.
package chaos
