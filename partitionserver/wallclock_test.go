package partitionserver

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"tablestore/internal/edm"
	"tablestore/internal/failpoint"
	pb "tablestore/proto/tablestorepb"
)

// clockMaster records the wall time each heartbeat says it was sent at,
// less the master's own clock when it arrived.
type clockMaster struct {
	pb.UnimplementedMasterServiceServer
	mu      sync.Mutex
	offsets []time.Duration
}

func (m *clockMaster) Heartbeat(_ context.Context, req *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offsets = append(m.offsets, time.Duration(req.GetSentUnixNano()-time.Now().UnixNano()))
	return &pb.HeartbeatResponse{}, nil
}

// offsetSince is the last reported offset among the heartbeats after the
// first n, and how many there are.
func (m *clockMaster) offsetSince(n int) (time.Duration, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.offsets) <= n {
		return 0, len(m.offsets)
	}
	return m.offsets[len(m.offsets)-1], len(m.offsets)
}

// TestClockOffsetFailpoint arms, changes and disarms the server's clock
// offset (ClockOffsetPoint, as chaos's clock fault does over HTTP) while a
// range it leads takes writes: its heartbeats report the shifted clock to
// the master and its write proposals carry the same clock (a Timestamp 90 s
// ahead, through Write and WriteMany), both back once disarmed; a clock
// set behind stamps nothing below the range's log clock, which stays ahead
// after the heal (nextTimestamp).
func TestClockOffsetFailpoint(t *testing.T) {
	m := &clockMaster{}
	s := started(t, newAgainstMaster(t, m, nil))
	t.Cleanup(func() { failpoint.Disable(ClockOffsetPoint) })
	const id = 51
	rep, v := leadingRangeWithWrites(t, s, id, 1, 0)

	n := 0
	write := func(rk string) time.Duration {
		t.Helper()
		n++
		op := func(rk string) []*pb.EntityOp {
			return []*pb.EntityOp{{Kind: pb.OpKind_OP_KIND_INSERT, PartitionKey: "p", RowKey: rk,
				Entity: edm.MarshalBinary(&edm.Entity{PartitionKey: "p", RowKey: rk})}}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var ts int64
		if n%2 == 0 { // alternately through WriteMany (writeMany's proposal)
			resp, err := v.WriteMany(ctx, &pb.WriteManyRequest{Writes: []*pb.WriteRequest{
				{RangeId: id, Generation: 1, Ops: op(rk), RequestId: []byte("id-" + rk)}}})
			if err != nil || len(resp.GetResults()) != 1 || resp.GetResults()[0].GetResponse() == nil {
				t.Fatalf("write many %s: %v %v", rk, resp, err)
			}
			ts = resp.GetResults()[0].GetResponse().GetTimestampUnixNano()
		} else {
			resp, err := v.Write(ctx, &pb.WriteRequest{RangeId: id, Generation: 1, Ops: op(rk), RequestId: []byte("id-" + rk)})
			if err != nil {
				t.Fatalf("write %s: %v", rk, err)
			}
			ts = resp.GetTimestampUnixNano()
		}
		return time.Duration(ts - time.Now().UnixNano())
	}
	// near says d is within 5 s of want (the test's own delays).
	near := func(d, want time.Duration) bool { return d > want-5*time.Second && d < want+5*time.Second }
	// heartbeat waits for a heartbeat sent after now and returns its
	// reported offset.
	heartbeat := func() time.Duration {
		t.Helper()
		_, seen := m.offsetSince(0)
		time.Sleep(2 * s.cfg.HeartbeatInterval) // one may be on its way, read before
		_, seen2 := m.offsetSince(0)
		seen = max(seen, seen2)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if off, got := m.offsetSince(seen); got > seen {
				return off
			}
			if time.Now().After(deadline) {
				t.Fatal("no heartbeat reached the master")
			}
		}
	}
	steps := []struct {
		name       string
		arm        string // the offset action, "" disarms
		heartbeat  time.Duration
		proposal   time.Duration
		stamps     time.Duration // a write's Timestamp, less now
		stampsOver time.Duration // or, when set: at least this
	}{
		{name: "unshifted", heartbeat: 0, proposal: 0, stamps: 0},
		{name: "ahead", arm: "offset:90s", heartbeat: 90 * time.Second, proposal: 90 * time.Second, stamps: 90 * time.Second},
		// The log clock stays where the clock ahead took it.
		{name: "behind", arm: "offset:-90s", heartbeat: -90 * time.Second, proposal: -90 * time.Second, stampsOver: 80 * time.Second},
		{name: "healed", heartbeat: 0, proposal: 0, stampsOver: 80 * time.Second},
	}
	for _, st := range steps {
		if st.arm != "" {
			d, err := time.ParseDuration(st.arm[len("offset:"):])
			if err != nil {
				t.Fatal(err)
			}
			failpoint.EnableOffset(ClockOffsetPoint, d)
		} else {
			failpoint.Disable(ClockOffsetPoint)
		}
		if got := heartbeat(); !near(got, st.heartbeat) {
			t.Fatalf("%s: the heartbeat reports a clock %v off, want %v", st.name, got, st.heartbeat)
		}
		if got := time.Duration(rep.proposalTime() - time.Now().UnixNano()); !near(got, st.proposal) {
			t.Fatalf("%s: a proposal's time is %v off, want %v", st.name, got, st.proposal)
		}
		for i := range 2 { // once through each path
			got := write(fmt.Sprintf("%s-%d", st.name, i))
			if st.stampsOver != 0 && got < st.stampsOver || st.stampsOver == 0 && !near(got, st.stamps) {
				t.Fatalf("%s: a write stamped %v from now, want %v (or at least %v)", st.name, got, st.stamps, st.stampsOver)
			}
		}
	}
}
