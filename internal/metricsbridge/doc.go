// Package metricsbridge owns the process-wide metrics plumbing: it routes
// hashicorp/raft's go-metrics into the Prometheus default registry (as
// tablestore_raft_* series) and serves /metrics.
package metricsbridge
