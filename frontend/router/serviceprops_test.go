package router

import (
	"context"
	"log/slog"
	"testing"

	pb "tablestore/proto/tablestorepb"
)

// TestServicePropertiesByAccount: the router answers each account's
// service properties from the map (whole maps and the watch's deltas); from
// a master that keeps one document (an older build, no
// per_account_service_properties) every account reads that one, as before.
func TestServicePropertiesByAccount(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Masters = []string{"127.0.0.1:1"} // never called
	r, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	get := func(account string) string {
		t.Helper()
		doc, err := r.ServiceProperties(context.Background(), account)
		if err != nil {
			t.Fatal(err)
		}
		return string(doc)
	}
	tests := []struct {
		name string
		m    *pb.PartitionMap
		want map[string]string // account -> document
	}{
		{"older master: one document for all", &pb.PartitionMap{Epoch: 1, Version: 1, ServiceProperties: []byte("shared")},
			map[string]string{"": "shared", "acctone": "shared", "accttwo": "shared"}},
		{"per account", &pb.PartitionMap{Epoch: 2, Version: 1, ServiceProperties: []byte("primary"), PerAccountServiceProperties: true,
			AccountServiceProperties: map[string][]byte{"acctone": []byte("one")}},
			map[string]string{"": "primary", "acctone": "one", "accttwo": ""}},
		{"delta of a leader change: the documents kept", &pb.PartitionMap{Epoch: 2, Version: 2, Delta: true, Servers: []*pb.ServerInfo{{ServerId: "a"}},
			ServiceProperties: []byte("primary"), PerAccountServiceProperties: true, Leaders: map[uint64]string{1: "a"}},
			map[string]string{"": "primary", "acctone": "one", "accttwo": ""}},
		{"delta carrying the documents", &pb.PartitionMap{Epoch: 2, Version: 3, Delta: true, Servers: []*pb.ServerInfo{{ServerId: "a"}}, PerAccountServiceProperties: true,
			AccountServiceProperties: map[string][]byte{"accttwo": []byte("two")}, AccountServicePropertiesCarried: true},
			map[string]string{"": "", "acctone": "", "accttwo": "two"}},
	}
	for _, tt := range tests {
		if tt.m.GetDelta() {
			if !r.applyStreamDelta(tt.m) {
				t.Fatalf("%s: delta refused", tt.name)
			}
		} else {
			r.install(tt.m)
		}
		for account, want := range tt.want {
			if got := get(account); got != want {
				t.Errorf("%s: %q reads %q, want %q", tt.name, account, got, want)
			}
		}
	}
}
