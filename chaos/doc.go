// Package chaos is a Jepsen-style fault-injection harness: it runs the
// roles as separate processes of the real binary, injects crashes, clean shutdowns, pauses,
// master-leader kills, network cuts and slow or failing disks (by seed)
// while the official Azure SDK writes, reshapes the key space with
// `tablestore ctl`, then heals everything and checks that no acknowledged
// write was lost, duplicated or changed, that no counter increment was
// lost, that a sample of keys has a linearizable history, that every
// query scan (followed page by page through its continuations while the
// faults and reshapes run) returned each entity acknowledged before its
// page was asked (on the read-access secondary: before its LastSyncTime),
// once, in key order (scan.go), and that every range is led and fully
// replicated again. `make chaos SEEDS=N` runs it;
// docs/reliability.md has the results.
package chaos
