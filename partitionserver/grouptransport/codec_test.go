package grouptransport

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func hdr() raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: 3, ID: []byte("ps1"), Addr: []byte("127.0.0.1:7301")}
}

func TestRequestRoundTrip(t *testing.T) {
	at := time.Unix(0, 1700000000123456789)
	cases := []struct {
		name string
		msg  any
	}{
		{"append with entries", &raft.AppendEntriesRequest{RPCHeader: hdr(), Term: 7, Leader: []byte("l"), PrevLogEntry: 10, PrevLogTerm: 6, LeaderCommitIndex: 9,
			Entries: []*raft.Log{{Index: 11, Term: 7, Type: raft.LogCommand, Data: []byte("data"), Extensions: []byte("x"), AppendedAt: at}, {Index: 12, Term: 7, Type: raft.LogNoop}}}},
		{"heartbeat", &raft.AppendEntriesRequest{RPCHeader: hdr(), Term: 7, Leader: []byte("l")}},
		{"vote", &raft.RequestVoteRequest{RPCHeader: hdr(), Term: 8, Candidate: []byte("c"), LastLogIndex: 5, LastLogTerm: 4, LeadershipTransfer: true}},
		{"pre-vote", &raft.RequestPreVoteRequest{RPCHeader: hdr(), Term: 8, LastLogIndex: 5, LastLogTerm: 4}},
		{"timeout now", &raft.TimeoutNowRequest{RPCHeader: hdr()}},
		{"snapshot", &raft.InstallSnapshotRequest{RPCHeader: hdr(), SnapshotVersion: 1, Term: 3, Leader: []byte("l"), LastLogIndex: 100, LastLogTerm: 3,
			Configuration: []byte("conf"), ConfigurationIndex: 90, Size: 1 << 20}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, kind, err := encodeRequest(nil, c.msg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeRequest(kind, e)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.msg) {
				t.Fatalf("round trip:\n got %#v\nwant %#v", got, c.msg)
			}
			for cut := 0; cut < len(e); cut++ {
				if _, err := decodeRequest(kind, e[:cut]); err == nil {
					t.Fatalf("truncated to %d of %d bytes decoded without error", cut, len(e))
				}
			}
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	cases := []struct {
		name      string
		msg, into any
	}{
		{"append", &raft.AppendEntriesResponse{RPCHeader: hdr(), Term: 7, LastLog: 12, Success: true, NoRetryBackoff: true}, &raft.AppendEntriesResponse{}},
		{"vote", &raft.RequestVoteResponse{RPCHeader: hdr(), Term: 8, Peers: []byte("p"), Granted: true}, &raft.RequestVoteResponse{}},
		{"pre-vote", &raft.RequestPreVoteResponse{RPCHeader: hdr(), Term: 8, Granted: true}, &raft.RequestPreVoteResponse{}},
		{"timeout now", &raft.TimeoutNowResponse{RPCHeader: hdr()}, &raft.TimeoutNowResponse{}},
		{"snapshot", &raft.InstallSnapshotResponse{RPCHeader: hdr(), Term: 3, Success: true}, &raft.InstallSnapshotResponse{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := appendResponse(nil, c.msg, nil)
			if err := result(p, c.into); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.into, c.msg) {
				t.Fatalf("got %#v, want %#v", c.into, c.msg)
			}
		})
	}
	if err := result(appendResponse(nil, nil, ErrUnknownGroup), &raft.AppendEntriesResponse{}); err != ErrUnknownGroup {
		t.Fatalf("unknown group came back as %v", err)
	}
}

// FuzzDecodeRequest: no input makes the decoder panic or allocate without
// bound, and whatever it accepts is a message the encoder takes.
func FuzzDecodeRequest(f *testing.F) {
	for kind := kindAppendEntries; kind <= kindInstallSnapshot; kind++ {
		f.Add(kind, []byte{})
	}
	e, _, _ := encodeRequest(nil, &raft.AppendEntriesRequest{RPCHeader: hdr(), Term: 1, Entries: []*raft.Log{{Index: 1, Term: 1, Data: []byte("d")}}})
	f.Add(kindAppendEntries, []byte(e))
	f.Fuzz(func(t *testing.T, kind byte, p []byte) {
		msg, err := decodeRequest(kind, p)
		if err != nil {
			return
		}
		if _, _, err := encodeRequest(nil, msg); err != nil {
			t.Fatalf("decoded %T does not encode: %v", msg, err)
		}
	})
}
