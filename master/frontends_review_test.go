package master

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "tablestore/proto/tablestorepb"
)

// TestCheckedFrontendBoundedAndValid (review, h3): what one watch
// registers stays small whatever its peer sends (the master holds it for
// the stream's life and ListFrontends returns every one, under the
// client's 4 MiB receive limit), and stays valid UTF-8 (a proto3 string
// that is not fails the marshal of every ListFrontends answer while the
// watch is open).
func TestCheckedFrontendBoundedAndValid(t *testing.T) {
	const maxSize = 4 << 10
	huge := strings.Repeat("a", 1<<20)
	unknown := &pb.FrontendInfo{Id: "fe"}
	unknown.ProtoReflect().SetUnknown(protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, 1<<20)))
	for _, tc := range []struct {
		name string
		in   *pb.FrontendInfo
	}{
		{"a metrics address of a megabyte", &pb.FrontendInfo{Id: "fe", MetricsAddr: huge + ":9090"}},
		{"HTTP addresses of a megabyte each", &pb.FrontendInfo{Id: "fe", HttpAddrs: []string{huge + ":1", huge + ":2"}}},
		{"a megabyte of unknown fields", unknown},
		{"a version cut inside a character", &pb.FrontendInfo{Id: "fe", Version: strings.Repeat("a", maxFrontendVersionLen-1) + "é and more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkedFrontend(tc.in, "10.0.0.1:5000")
			b, err := proto.Marshal(&pb.ListFrontendsResponse{Frontends: []*pb.WatchingFrontend{{Frontend: got}}})
			if err != nil {
				t.Fatalf("the ListFrontends answer listing it does not marshal: %v", err)
			}
			if len(b) > maxSize {
				t.Errorf("registered %d bytes, want at most %d", len(b), maxSize)
			}
		})
	}
}
