// Package grouptransport carries the Raft traffic of every range group on a
// partition server over a few connections per remote server, instead of the
// pooled connections per group per peer that one hashicorp/raft
// NetworkTransport per group needs (200 tables held ~7,400 loopback
// connections, each message with its own msgpack encoder and syscalls).
//
// One Transport per server owns the listener and, per remote server, two
// long-lived outgoing connections ("lanes"): the control lane carries
// heartbeats, votes and TimeoutNow; the append lane carries AppendEntries,
// pipelined. Snapshots get a connection of their own for the length of one
// install, so neither a snapshot nor a large append ever delays a heartbeat
// of another group. Every range group gets a Group, its raft.Transport view:
// it registers the group's consumer channel and sends through the shared
// lanes. Each message is encoded once, by the sending goroutine, into a
// pooled buffer (a hand-written binary form of raft's RPC structs, no
// reflection); one writer goroutine per connection drains the queued frames
// of all groups and writes them with one flush. Responses are matched by
// request id; the receiving side delivers requests to each group in order
// (one inbox per group per connection), so one slow group never blocks the
// others on the same connection. A request for a group not open here is
// answered at once with ErrUnknownGroup.
//
// A third long-lived lane, dialed on first use, carries quiet-read
// confirmations (ConfirmQuiet): a server asks the other voters of a closed
// group whether they are still where the group went quiet, answered by the
// server's Confirmer without opening the group.
//
// Connections are made by a dial function and accepted from a net.Listener
// passed in, so TLS can wrap them without this package knowing. A Fault hook,
// when set, is consulted before each request is sent or delivered, so chaos
// tests can drop or delay the traffic to one peer; unset, it costs a nil
// check.
//
// Quiescence (issue 9) plugs in here: the transport already knows every
// group per peer, so a server-pair liveness message (a frame for group 0 on
// the control lane) can replace the heartbeats of quiet groups, and a
// follower of a quiet group learns that its leader's server is gone from the
// pair liveness instead of its own heartbeat timer.
package grouptransport
