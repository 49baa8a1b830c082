// Package connpool owns shared gRPC client connections to partition servers,
// keyed by address, for the roles that call them (master, front-end).
package connpool
