package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"tablestore/internal/masterclient"
	pb "tablestore/proto/tablestorepb"
)

// clockPoint is the failpoint that shifts a partition server's wall clock
// (partitionserver.ClockOffsetPoint): the clock its heartbeats report and
// its leaders stamp writes with.
const clockPoint = "partitionserver/clock/offset"

// clockFault sets ps's clock off by d while it runs: the master should
// find it skewed (over --max-clock-offset), move its leaderships off, and
// past a minute its leaders refuse writes until then; its writes meanwhile
// carry its clock into their ranges' log clocks. The heal sets it right
// (disarm); a server restarted meanwhile comes back with its clock right.
func clockFault(c *cluster, ps *role, d time.Duration) fault {
	dir := "ahead"
	if d < 0 {
		dir = "behind"
	}
	name := fmt.Sprintf("clock %s on %s by %v", dir, ps.name, d.Abs())
	if err := c.setFailpoint(ps, clockPoint, "offset:"+d.String()); err != nil {
		name += " (not set: " + err.Error() + ")"
	}
	return fault{name: name, heal: func() { c.disarm(ps) }, clockOn: ps.name}
}

// forcedClockOffset is $TABLESTORE_CHAOS_CLOCK_OFFSET: when set, every
// fault of the run is a clock fault of that shift on a range leader of
// the table (an exploration, not the default mix: a leader clock more
// than the request records' 10 minutes ahead can make a prune forget the
// record a retry still carries; docs/reliability.md, section 36).
func forcedClockOffset() (time.Duration, bool) {
	v := os.Getenv("TABLESTORE_CHAOS_CLOCK_OFFSET")
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil || d == 0 {
		return 0, false
	}
	return d, true
}

// rangeLeader is the leader of one of the table's ranges, the i-th
// modulo their number, by the master's map (else server i).
func (c *cluster) rangeLeader(i int) *role {
	var leaders []string
	if pm, err := c.partitionMap(); err == nil {
		for _, r := range pm.GetRanges() {
			if l := pm.GetLeaders()[r.GetRangeId()]; r.GetTable() == table && l != "" {
				leaders = append(leaders, l)
			}
		}
	}
	if len(leaders) > 0 {
		for _, s := range c.servers {
			if s.name == leaders[i%len(leaders)] {
				return s
			}
		}
	}
	return c.servers[i%len(c.servers)]
}

// clockNotes notes what the clock faults caused, as findings rather than
// violations (the checks are the same for every fault): for each, the
// leaderships the master moved off the skewed server with cause
// clock-skew from the fault's start to 10 s after its heal, and how soon
// the first moved; and, over the run, the verdicts the masters' logs show
// and the refusals (503 ServerBusy to every write of the ranges a server
// leads, past a minute off) the servers' logs show. The logs are the
// roles' kept tails: the counts are at least these.
func clockNotes(c *cluster, res *Result, start time.Time, spans []faultSpan) {
	var clocks []faultSpan
	for _, f := range spans {
		if f.clockOn != "" {
			clocks = append(clocks, f)
		}
	}
	if len(clocks) == 0 {
		return
	}
	events, err := c.masterEvents()
	if err != nil {
		res.Notes = append(res.Notes, "clock faults: no event log: "+err.Error())
	}
	for _, f := range clocks {
		moved, first := 0, time.Duration(-1)
		for _, e := range events {
			at := time.Unix(0, e.GetUnixNano()).Sub(start)
			if e.GetKind() != pb.EventKind_EVENT_KIND_LEADER_TRANSFER || e.GetCause() != "clock-skew" ||
				len(e.GetServers()) == 0 || e.GetServers()[0] != f.clockOn || at < f.from || at > f.to+10*time.Second {
				continue
			}
			moved++
			if first < 0 {
				first = at - f.from
			}
		}
		note := fmt.Sprintf("t+%.1fs %s: %d leaderships moved off", f.from.Seconds(), f.name, moved)
		if first >= 0 {
			note += fmt.Sprintf(", the first %.1fs after", first.Seconds())
		}
		res.Notes = append(res.Notes, note)
	}
	verdicts, refusals := 0, map[string]int{}
	for _, m := range c.masters {
		verdicts += strings.Count(m.out.String(), "partition server's clock is off")
	}
	var rs []string
	for _, s := range c.servers {
		if n := strings.Count(s.out.String(), "refuse client writes"); n > 0 {
			refusals[s.name] = n
			rs = append(rs, fmt.Sprintf("%s %d", s.name, n))
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("clock verdicts logged by the masters: %d; servers that began refusing writes: %v", verdicts, rs))
}

// masterEvents reads the masters' event log (past the fault layer).
func (c *cluster) masterEvents() ([]*pb.Event, error) {
	mc, err := masterclient.New(c.masterDirect)
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*pb.Event
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		out = nil
		st, err := m.Events(ctx, &pb.EventsRequest{})
		if err != nil {
			return err
		}
		for {
			e, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			out = append(out, e)
		}
	})
	return out, err
}
