package loadgen

import (
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// clusterWatch samples what the master knows while a run lasts: the run's
// table's range count, each server's load as leader of its ranges, and the
// master's event log (the same Events API `ctl events` reads).
type clusterWatch struct {
	mc    *masterclient.Client
	table string
	begin time.Time

	mu      sync.Mutex
	samples []ClusterSample
	events  []ReportEvent
	next    uint64 // next event sequence number to read
	err     error  // last failure, for the report
}

func newClusterWatch(mc *masterclient.Client, table string, begin time.Time) *clusterWatch {
	return &clusterWatch{mc: mc, table: table, begin: begin}
}

// sampleTimeout bounds one sample's calls to the master. Without it a
// master that never answers (a wrong --master) kept each call waiting
// until the run ended, which counts as a sample cut off, so the report
// came out without cluster figures and without a cluster_error saying why.
const sampleTimeout = 3 * time.Second

// sample takes one sample of the partition map and reads new events. Its
// calls end when ctx does (the run ended: not a failure) or after
// sampleTimeout (a failure, recorded for the report).
func (w *clusterWatch) sample(ctx context.Context, now time.Time) {
	sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	var m *pb.PartitionMap
	err := w.mc.Call(sctx, func(ctx context.Context, c pb.MasterServiceClient) error {
		var err error
		m, err = c.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
		return err
	})
	evs, evErr := w.readEvents(sctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.samples = append(w.samples, clusterSampleOf(m, w.table, now.Sub(w.begin).Seconds()))
	}
	for _, e := range evs {
		if re, ok := reportEventOf(e, w.table, w.begin); ok {
			w.events = append(w.events, re)
		}
	}
	// A sample cut off by the end of the run is no failure of the master.
	if err = errors.Join(err, evErr); err != nil && ctx.Err() == nil {
		w.err = err
	}
}

// readEvents reads the events logged since the last call.
func (w *clusterWatch) readEvents(ctx context.Context) ([]*pb.Event, error) {
	conn, i := w.mc.Conn()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := pb.NewMasterServiceClient(conn).Events(cctx, &pb.EventsRequest{SinceSeq: w.next})
	var out []*pb.Event
	for err == nil {
		var e *pb.Event
		if e, err = stream.Recv(); err == nil && e.GetSeq() >= w.next {
			w.next = e.GetSeq() + 1
			out = append(out, e)
		}
	}
	if errors.Is(err, io.EOF) {
		return out, nil
	}
	w.mc.Advance(i)
	return out, err
}

// clusterSampleOf counts table's ranges in m and sums the load of every
// server as leader of them.
func clusterSampleOf(m *pb.PartitionMap, table string, elapsed float64) ClusterSample {
	s := ClusterSample{ElapsedSeconds: elapsed, ServerEntitiesPerSec: map[string]float64{}}
	for _, sv := range m.GetServers() {
		if sv.GetAlive() {
			s.ServerEntitiesPerSec[sv.GetServerId()] = 0
		}
	}
	for _, r := range m.GetRanges() {
		if !strings.EqualFold(r.GetTable(), table) {
			continue
		}
		s.Ranges++
		if l := m.GetLeaders()[r.GetRangeId()]; l != "" {
			s.ServerEntitiesPerSec[l] += m.GetLoads()[r.GetRangeId()].GetEntitiesPerSec()
		}
	}
	return s
}

// reportEventOf keeps the events that explain a run's figures: those of
// its table or of no table (servers), from the run's start on.
func reportEventOf(e *pb.Event, table string, begin time.Time) (ReportEvent, bool) {
	at := time.Unix(0, e.GetUnixNano())
	if at.Before(begin) || (e.GetTable() != "" && !strings.EqualFold(e.GetTable(), table)) {
		return ReportEvent{}, false
	}
	kind := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(e.GetKind().String(), "EVENT_KIND_")), "_", "-")
	if kind == "table-created" || kind == "table-deleted" {
		return ReportEvent{}, false
	}
	return ReportEvent{
		Seq: e.GetSeq(), ElapsedSeconds: at.Sub(begin).Seconds(), Time: at, Kind: kind, Cause: e.GetCause(),
		Message: e.GetMessage(), Ranges: e.GetRangeIds(), Servers: e.GetServers(), Figures: e.GetFigures(),
		DurationSeconds: e.GetDurationSeconds(),
	}, true
}

// result returns the samples and events so far, in time order.
func (w *clusterWatch) result() ([]ClusterSample, []ReportEvent, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sort.SliceStable(w.events, func(i, j int) bool { return w.events[i].Seq < w.events[j].Seq })
	// Empty lists, not null, in the JSON.
	return append([]ClusterSample{}, w.samples...), append([]ReportEvent{}, w.events...), w.err
}
