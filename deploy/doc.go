// Package deploy holds the container image (Dockerfile), the docker compose
// file and the Kubernetes manifests (kubernetes/, a kustomization) of a
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
// The module has no YAML dependency, so the test parses the block-style YAML
// subset these files are written in (see yaml_test.go) and rejects anything
// outside it; commands are written as lists of "--flag=value" items.
package deploy
