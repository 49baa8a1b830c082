// Package logging owns the process logger setup: log/slog with key/value
// pairs for every role, and the bridge that routes hashicorp/raft's hclog
// output into the same slog handler.
package logging
