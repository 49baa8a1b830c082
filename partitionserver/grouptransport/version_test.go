package grouptransport

import (
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// kindVersions is, for every kind of range log entry, the protocol
// version that introduced it (helloVersion's comment): a server of an
// earlier version answers the kind "unknown command" and would diverge
// from its group, so it must be a down peer of every server that may
// propose it.
var kindVersions = map[pb.CommandKind]byte{
	pb.CommandKind_COMMAND_KIND_UNSPECIFIED:  1,
	pb.CommandKind_COMMAND_KIND_WRITE:        1,
	pb.CommandKind_COMMAND_KIND_SPLIT:        1,
	pb.CommandKind_COMMAND_KIND_FREEZE:       1,
	pb.CommandKind_COMMAND_KIND_ABSORB:       1,
	pb.CommandKind_COMMAND_KIND_SET_REPLICAS: 1,
	pb.CommandKind_COMMAND_KIND_MERGE:        1,
	pb.CommandKind_COMMAND_KIND_QUIESCE:      1,
	pb.CommandKind_COMMAND_KIND_WRITE_BATCH:  2,
	pb.CommandKind_COMMAND_KIND_UNFREEZE:     3,
	pb.CommandKind_COMMAND_KIND_SPLIT_SPAN:   5,
	pb.CommandKind_COMMAND_KIND_MERGE_SPANS:  5, // came in version 5's session, without a bump of its own
	pb.CommandKind_COMMAND_KIND_DETACH_SPAN:  6,
	pb.CommandKind_COMMAND_KIND_ADD_SPAN:     7,
	pb.CommandKind_COMMAND_KIND_ATTACH_SPAN:  9,
}

// fieldVersions is, for a field of an existing kind's command whose apply
// a server of an earlier version would ignore (and so diverge), the
// protocol version that introduced it.
var fieldVersions = map[string]byte{
	"AddSpanCommand.max_spans": 8,
}

// TestHelloVersionCoversEveryCommandKind: a new kind of log entry comes
// with a new protocol version (and a line here): the version is at least
// every kind's, and the newest kind's exactly.
func TestHelloVersionCoversEveryCommandKind(t *testing.T) {
	var newest byte
	for n, name := range pb.CommandKind_name {
		v, ok := kindVersions[pb.CommandKind(n)]
		if !ok {
			t.Errorf("%s has no protocol version: raise helloVersion (codec.go) and list it here", name)
			continue
		}
		newest = max(newest, v)
	}
	for _, v := range fieldVersions {
		newest = max(newest, v)
	}
	if helloVersion != newest {
		t.Errorf("helloVersion %d, the newest command kind's or field's version %d", helloVersion, newest)
	}
}
