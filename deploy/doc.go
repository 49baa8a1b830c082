// Package deploy holds the container image (Dockerfile), the docker compose
// file, the Kubernetes manifests (kubernetes/, a kustomization) and the
// monitoring files (monitoring/) of a
// production-shaped tablestore cluster: three masters, three partition
// servers and stateless front-ends. docs/deploy.md explains how to use them.
//
// The package has no Go code of its own: its test validates the files
// without Docker or Kubernetes. It builds cmd/tablestore, reads the flags of
// every role from the binary's own -h output and checks that each command
// line in the compose file and the manifests uses only subcommands and flags
// the binary accepts, with values its flag parser accepts (the binary parses
// each command line, with the pod's environment substituted, before -h). It
// also checks that the files agree with each other: master --peers ids equal
// the --id of each master (the pod names), every peer and advertised address
// is the stable DNS name of that pod or service on the port it listens on,
// --masters lists every master, probes, Services, PodDisruptionBudgets and
// Prometheus annotations point at declared ports, and masters and partition
// servers keep --data-dir on a persistent volume.
//
// Every manifest is also decoded strictly into its Kubernetes API type
// (k8s.io/api via sigs.k8s.io/yaml) and checked there: HTTP probes on
// /healthz and /readyz with the semantics internal/health serves (liveness
// never follows readiness), required per-node anti-affinity for the Raft
// roles and zone spread, a PodDisruptionBudget per workload, grace periods
// that cover the preStop sleep and the binary's shutdown bound, the pod
// security settings (the Dockerfile's uid), the front-ends' autoscaler, the
// account key as a Secret file, and the args index docs/deploy.md patches
// to replace a master. The monitoring files (monitoring/: alert
// rules, Grafana dashboard; kubernetes/monitoring/: ServiceMonitor,
// PrometheusRule) are checked with promtool and against the metric names a
// running in-process cluster exports. Commands are written as lists of
// "--flag=value" items.
package deploy
