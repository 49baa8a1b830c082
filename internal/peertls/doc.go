// Package peertls is mutual TLS between tablestore's roles: the gRPC
// services (master, partition servers) and the Raft traffic (the masters'
// group and the range groups) are served and dialled with certificates from
// files (--tls-cert, --tls-key, --tls-ca), each side verifying the other
// against the CA. Without those flags everything stays plaintext, as on a
// developer's machine.
//
// Certificates are read again when their files change (checked at most once
// a second, at handshakes), so a rotation by a secret update needs no
// restart.
package peertls
