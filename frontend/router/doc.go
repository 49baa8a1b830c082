// Package router owns the front-end's view of the cluster: a partition-map
// cache fed by a watch on the master, the routing of each request by
// (table, PartitionKey) to the leader of the range that holds it, the
// transparent retries on a stale map or a leader change, and the ordered
// fan-out of scans across ranges. It implements frontend.Backend.
package router
