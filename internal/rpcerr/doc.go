// Package rpcerr owns the error contract between the servers (master,
// partition server) and the front-end: gRPC status codes carrying a
// google.rpc.ErrorInfo whose Reason is one of the constants here. Servers
// translate their internal errors into these once; the front-end translates
// them into Azure error codes once.
package rpcerr
