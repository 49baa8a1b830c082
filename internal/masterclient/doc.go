// Package masterclient owns the client side of the master's gRPC service used
// by partition servers, front-ends and ctl: it keeps connections to every
// master, finds the Raft leader and retries calls that reach a follower.
package masterclient
