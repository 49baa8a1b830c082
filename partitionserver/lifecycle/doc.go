// Package lifecycle decides, for one range replica on one server, whether
// it exists here and whether its Raft member is open: one explicit state
// machine per replica (Machine) fed with every event that used to be a
// rule of its own in the server (found at start, created by the master or
// a split, merged away, deleted, a request or a Raft message arriving, the
// range going quiet, shutdown), the answer a quiet replica gives to
// Raft traffic without being opened (Answer), and what to do about a range
// the master assigns to this server (Assigned), and that a replica whose open found its
// files damaged is Broken (the registry says when). It performs nothing: the
// server's registry executes the actions it returns and logs each
// transition with its cause.
package lifecycle
