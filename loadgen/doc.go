// Package loadgen owns `tablestore loadgen`, a load generator that drives a
// table through the official Azure SDK (aztables) with the key patterns of
// the Azure table design guide, so the split, merge, balancing and
// throttling behaviour can be provoked and watched:
//
//   - uniform: inserts spread evenly over N PartitionKeys;
//   - hot-partition: every insert goes to one PartitionKey (cannot be split;
//     beyond the per-partition target the service answers 503 ServerBusy);
//   - append: monotonically increasing, zero-padded time-based
//     PartitionKeys, the prepend/append (and log data) anti-pattern: every
//     insert lands at the end of the key space, so however the last range is
//     split, its right half stays hot;
//   - zipf: PartitionKeys drawn Zipf-distributed over N (a few hot keys, a
//     long cold tail).
//
// Workers share one token bucket (--rate), optionally mix in point reads of
// entities they wrote (--read-ratio), and the SDK's retries are off so every
// 503 and timeout is counted rather than hidden. Each second one line reports
// entities/s, p50/p99 latency and errors by Azure error code and HTTP status;
// a summary closes the run. With --json the lines are JSON objects (fields in
// docs/operations.md). The run stops by itself after --duration, or on
// Ctrl-C, and only ever talks to the endpoint of the connection string.
package loadgen
