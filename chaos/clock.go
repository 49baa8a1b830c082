package chaos

import (
	"context"
	"fmt"
	"os"
	"slices"
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
		return 0, false // Run refuses it (checkForcedClock)
	}
	return d, true
}

// checkForcedClock fails on a $TABLESTORE_CHAOS_CLOCK_OFFSET that is set
// but no nonzero duration: the run would silently be the default mix.
func checkForcedClock() error {
	v := os.Getenv("TABLESTORE_CHAOS_CLOCK_OFFSET")
	if _, ok := forcedClockOffset(); v != "" && !ok {
		return fmt.Errorf("chaos: TABLESTORE_CHAOS_CLOCK_OFFSET=%q is not a nonzero duration", v)
	}
	return nil
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
// violations (the checks are the same for every fault): for each, when
// the master's map first and last called the server clock-skewed (polled
// every 500 ms), from the fault's start to 15 s after its heal (or to the
// server's next clock fault), and the
// leaderships it moved off the server with cause clock-skew in that time
// and how soon the first moved; over the run, the servers whose logs show
// them starting to refuse writes (503 ServerBusy to every write of the
// ranges they lead, past a minute off; the logs are the roles' kept
// tails: at least these).
func clockNotes(c *cluster, res *Result, start time.Time, spans []faultSpan, places []placement) {
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
	const after = 15 * time.Second
	for i, f := range clocks {
		// Up to 15 s after the heal, or to the next clock fault of the
		// server: what follows is that one's.
		end := f.to + after
		for _, g := range clocks[i+1:] {
			if g.clockOn == f.clockOn {
				end = min(end, g.from)
				break
			}
		}
		note := fmt.Sprintf("t+%.1f-%.1fs %s: ", f.from.Seconds(), f.to.Seconds(), f.name)
		if from, to, ok := skewedSpan(places, f.clockOn, f.from, end); ok {
			note += fmt.Sprintf("skewed in the map from %+.1fs after the start to %+.1fs after the heal", (from - f.from).Seconds(), (to - f.to).Seconds())
		} else {
			note += "never skewed in the map"
		}
		moved, first := 0, time.Duration(-1)
		for _, e := range events {
			at := time.Unix(0, e.GetUnixNano()).Sub(start)
			if e.GetKind() != pb.EventKind_EVENT_KIND_LEADER_TRANSFER || e.GetCause() != "clock-skew" ||
				len(e.GetServers()) == 0 || e.GetServers()[0] != f.clockOn || at < f.from || at > end {
				continue
			}
			moved++
			if first < 0 {
				first = at - f.from
			}
		}
		note += fmt.Sprintf(", %d leaderships moved off", moved)
		if first >= 0 {
			note += fmt.Sprintf(" (the first %.1fs after the start)", first.Seconds())
		}
		res.Notes = append(res.Notes, note)
	}
	var rs []string
	for _, s := range c.servers {
		if n := strings.Count(s.out.String(), "refuse client writes"); n > 0 {
			rs = append(rs, fmt.Sprintf("%s %d", s.name, n))
		}
	}
	res.Notes = append(res.Notes, fmt.Sprintf("began refusing writes: %v", rs))
}

// skewedSpan is the first and last poll in [from, to] whose map called
// server clock-skewed.
func skewedSpan(places []placement, server string, from, to time.Duration) (first, last time.Duration, ok bool) {
	for _, p := range places {
		if p.at < from || p.at > to || !slices.Contains(p.skewed, server) {
			continue
		}
		if !ok {
			first, ok = p.at, true
		}
		last = p.at
	}
	return first, last, ok
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
		var err error
		out, err = masterclient.ReadEvents(ctx, m)
		return err
	})
	return out, err
}
