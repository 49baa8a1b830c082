package loadgen

import (
	"context"
	"net"
	"testing"
	"time"

	"tablestore/internal/masterclient"
)

// TestClusterWatchUnreachableMaster: a --master nothing answers at (the
// dev master is not at the default 127.0.0.1:7000 unless --base-port says
// so) gives the report a cluster_error within sampleTimeout, not a report
// without cluster figures that says nothing.
func TestClusterWatchUnreachableMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	mc, err := masterclient.New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	w := newClusterWatch(mc, "t", time.Now())
	began := time.Now()
	w.sample(context.Background(), time.Now())
	if took := time.Since(began); took > sampleTimeout+2*time.Second {
		t.Errorf("sample took %v, want about sampleTimeout (%v)", took, sampleTimeout)
	}
	samples, _, err := w.result()
	if len(samples) != 0 || err == nil {
		t.Fatalf("%d samples, error %v; want none and an error", len(samples), err)
	}

	// A sample cut off by the end of the run is no failure.
	w = newClusterWatch(mc, "t", time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	w.sample(ctx, time.Now())
	if _, _, err := w.result(); err != nil {
		t.Errorf("sample cut off by the run's end: error %v, want none", err)
	}
}
