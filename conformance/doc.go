// Package conformance holds the Azure Table API conformance tests: the
// official Go SDK (aztables) and raw SharedKeyLite-signed HTTP requests,
// for what the SDK cannot send, against a real in-process cluster (one
// master, three partition servers, one front-end, cluster) that
// the whole test binary shares. Each file covers one area of the API and
// docs/compatibility.md maps every operation and behaviour to its test.
//
// The package has no code outside its tests.
package conformance
