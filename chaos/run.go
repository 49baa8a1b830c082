package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/anishathalye/porcupine"

	"tablestore/internal/connpool"
	"tablestore/internal/masterclient"
	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

const table = "chaos"

// Options configure one run.
type Options struct {
	Seed     int64
	Binary   string        // the tablestore binary
	Dir      string        // data directories
	Duration time.Duration // of the fault phase
	Logf     func(format string, args ...any)
	// Reshapes is how many reshaping operations are asked for with each
	// fault (0: one).
	Reshapes int
	// Tables is how many small tables the tables workload keeps live
	// (tables.go; 0: none).
	Tables int
}

// Result is what one seed found.
type Result struct {
	Seed                       int64
	Faults                     []string
	Acked, Unknown             int // inserts and batch entities
	Lost, Duplicated, WrongVal int
	BatchTorn                  int // a batch partly applied
	LostUpdates                int // counter below its acknowledged increments
	PhantomUpdates             int // counter above acknowledged + unknown
	Increments                 int
	HistoryOps                 int
	Linearizable               bool
	Converged                  time.Duration // heal -> every range led and fully replicated
	ConvergedOK                bool
	Writes, Failures           int64
	Refused                    int64         // connections the fault layer cut
	MaxGap                     time.Duration // longest window without a successful write to one key
	MaxGapKey                  string
	MaxGapEnd                  time.Duration // since the workload started
	// The availability figure: the longest part of a write gap
	// during which a majority of the key's range replicas and of the
	// masters was up (availability.go), and the faults around it.
	MajorityGap       time.Duration
	MajorityGapKey    string
	MajorityGapEnd    time.Duration
	MajorityGapFaults []string
	// MajorityGapBetween is the figure as sessions 4-6 measured it: from
	// the last successful write to a key rather than from the first
	// attempt after it (it charges a key with the time its writers waited
	// on other ranges; availability.go, waits).
	MajorityGapBetween time.Duration
	// The scanners (scan.go): scans that completed and were checked,
	// scans that failed mid-way (not checked), the pages and entities the
	// completed ones returned, and their violations (each a problem too).
	Scans, ScansFailed      int
	ScansSecondary          int           // of Scans, on the read-access secondary
	ScansNoSync             int           // of those, without a LastSyncTime (nothing required)
	SecondaryLag            time.Duration // the most a secondary scan began after its LastSyncTime
	ScanRequired            int           // keys the completed scans had to return
	ScanPages, ScanEntities int
	ScanViolations          int
	Problems                []string
	Notes                   []string // findings that are not violations
	// Tables is what the tables workload found (TablesOn: it ran).
	TablesOn bool
	Tables   tableFindings
}

// OK reports whether the run found no violation.
func (r *Result) OK() bool { return len(r.Problems) == 0 }

// GapTarget is the bound on a write gap with a majority up.
const GapTarget = 3 * time.Second

// KeepLogs reports whether the seed's process logs are worth keeping: it
// failed, or missed the availability target (by either measure).
func (r *Result) KeepLogs() bool {
	return !r.OK() || r.MajorityGap > GapTarget || r.MajorityGapBetween > GapTarget
}

func (r *Result) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Run runs one seed end to end.
func Run(o Options) (_ *Result, err error) {
	res := &Result{Seed: o.Seed}
	if err := checkForcedClock(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewSource(o.Seed))
	c, err := startCluster(o.Binary, o.Dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if _, explore := forcedClockOffset(); res.KeepLogs() || err != nil || explore {
			for _, r := range c.all() {
				os.WriteFile(filepath.Join(o.Dir, r.name+".log"), []byte(r.out.String()), 0o644)
			}
		}
		c.stop()
	}()
	sc, err := newClient(c.connString(), true)
	if err != nil {
		return nil, err
	}
	once, err := newClient(c.connString(), false)
	if err != nil {
		return nil, err
	}
	sec, err := newClient(c.secondaryConnString(), true)
	if err != nil {
		return nil, err
	}
	if tableGroups() {
		if err := c.awaitAnchor(o.Logf); err != nil {
			return nil, err
		}
	}
	if err := setup(sc); err != nil {
		return nil, err
	}
	if tableGroups() {
		if pm, err := c.partitionMap(); err == nil {
			for _, r := range pm.GetRanges() {
				if r.GetTable() == table {
					o.Logf("seed %d: table %s: range %d in Raft group %d", o.Seed, table, r.GetRangeId(), rangegroup.GroupOf(r))
				}
			}
		}
	}
	if err := c.allRunning(); err != nil {
		return nil, err
	}
	tc := sc.NewClient(table)
	w := startWorkload(tc, once.NewClient(table), sec)
	placements := c.watchPlacement(w.start)
	var tw *tablesWorkload
	if o.Tables > 0 {
		res.TablesOn = true
		tw = startTables(sc, once, c, o.Seed, o.Tables, o.Logf)
	}
	tablesRNG := rand.New(rand.NewSource(o.Seed ^ 0x7ab1e5))

	// Fault phase: one fault at a time, each healed before the next, with
	// reshaping operations in between.
	end := time.Now().Add(o.Duration)
	var faultTimes []faultSpan
	faultRNG := rand.New(rand.NewSource(faultSeed(o.Seed)))
	for time.Now().Before(end) {
		at := time.Since(w.start)
		f := inject(c, faultRNG)
		res.Faults = append(res.Faults, fmt.Sprintf("t+%.1fs %s", at.Seconds(), f.name))
		o.Logf("seed %d: %s", o.Seed, f.name)
		for range max(o.Reshapes, 1) {
			reshape(c, rng, o.Logf)
		}
		for range max(o.Reshapes/3, 1) {
			if tw != nil {
				tw.reshapeTables(tablesRNG)
			}
		}
		time.Sleep(time.Duration(2000+rng.Intn(3000)) * time.Millisecond)
		f.heal()
		faultTimes = append(faultTimes, faultSpan{f.name, at, time.Since(w.start), f.clockOn})
		if dead := c.reviveExited(); len(dead) > 0 {
			o.Logf("seed %d: restarted %v after they exited", o.Seed, dead)
		}
		time.Sleep(time.Duration(500+rng.Intn(1500)) * time.Millisecond)
	}
	// Heal everything, let the writers see the healed cluster briefly.
	c.net.heal()
	for _, r := range c.all() {
		c.mark(r.name, flagIsolated, false)
		c.signal(r, syscall.SIGCONT)
		c.mark(r.name, flagStopped, false)
		if r.cmd == nil || isClosed(r.done) {
			c.kill(r)
			c.start(r)
		}
		c.disarm(r)
	}
	healed := time.Now()
	time.Sleep(2 * time.Second)
	w.halt()
	if tw != nil {
		tw.halt()
	}
	c.ctlRunning.Wait()
	res.Writes, res.Failures = w.writes.Load(), w.failures.Load()
	scanResults(res, w, o)
	res.Refused = c.net.refused.Load()
	for k, g := range w.maxGap {
		if g > res.MaxGap {
			res.MaxGap, res.MaxGapKey = g, k
			res.MaxGapEnd = w.gapEnd[k]
		}
	}
	events, places := c.roleEvents(w.start), placements()
	majorityGap(res, w.waitGaps, events, places, c.masterNames(), faultTimes)
	for _, g := range w.gaps {
		res.MajorityGapBetween = max(res.MajorityGapBetween, majorityUpPart(g, events, places, c.masterNames()))
	}

	var why string
	res.Converged, res.ConvergedOK, why = converge(c, 30*time.Second)
	if !res.ConvergedOK {
		res.problem("ranges not all led and fully replicated 30s after healing: %s", why)
	} else {
		res.Converged = time.Since(healed)
	}
	if err := verify(tc, w, res); err != nil {
		res.problem("verification read failed: %v", err)
		// What was every role waiting on? (seed 246 of session 8: a
		// query page timed out on every try with nothing in the logs.)
		c.dumpGoroutines()
	}
	if tw != nil {
		checkTables(tw, res, 90*time.Second)
	}
	clockNotes(c, res, w.start, faultTimes, places)
	res.HistoryOps = len(w.history)
	check, info := porcupine.CheckOperationsVerbose(registerModel, w.history, 60*time.Second)
	switch check {
	case porcupine.Ok:
		res.Linearizable = true
	case porcupine.Illegal:
		path := filepath.Join(o.Dir, "linearizability.html")
		porcupine.VisualizePath(registerModel, info, path)
		res.problem("register history is not linearizable (see %s)", path)
	default:
		res.Linearizable = true // undecided in time: not counted as a violation
		o.Logf("seed %d: linearizability check timed out", o.Seed)
	}
	return res, nil
}

// setup creates the table and the counters, retrying while the cluster
// elects and registers.
func setup(sc *aztables.ServiceClient) error {
	deadline := time.Now().Add(90 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := opCtx()
		_, err = sc.CreateTable(ctx, table, nil)
		cancel()
		if err == nil || statusOf(err) == 409 {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err != nil && statusOf(err) != 409 {
		return fmt.Errorf("create table: %w", err)
	}
	tc := sc.NewClient(table)
	for i := 0; i < counters; i++ {
		body, _ := json.Marshal(map[string]any{"PartitionKey": fmt.Sprintf("cnt%d", i), "RowKey": "c", "V": "0", "V@odata.type": "Edm.Int64"})
		ctx, cancel := opCtx()
		_, err := tc.UpsertEntity(ctx, body, nil)
		cancel()
		if err != nil {
			return fmt.Errorf("create counter: %w", err)
		}
	}
	return nil
}

type fault struct {
	name string
	heal func()
	// clockOn names the server a clock fault set off (clockNotes).
	clockOn string
}

// faultKind is a kind of fault; its value is what the seed's fault rng
// draws (faultKinds of them, uniformly).
type faultKind int

const (
	faultKill faultKind = iota
	faultStop
	faultKillMasterLeader
	faultIsolate
	faultOneWay
	faultIsolateMaster
	faultSlowDisk
	faultFailingDisk
	faultTerminate
	faultClock
	faultKinds // how many there are
)

// clockOffsets are the clock fault's shifts: past the master's
// --max-clock-offset (10 s) ahead and behind, past the minute after which
// a skewed leader refuses writes, and 5 min ahead; all inside the request
// records' 10-minute TTL (partitionserver/fsm/dedup.go), which a leader
// clock further ahead can defeat (TABLESTORE_CHAOS_CLOCK_OFFSET explores
// that).
var clockOffsets = []time.Duration{15 * time.Second, -15 * time.Second, 90 * time.Second, -90 * time.Second, 5 * time.Minute}

// faultChoice is one fault as the seed chose it, before it meets the
// cluster: its kind, the partition server it strikes (an index), the
// server a one-way cut hides from it, the master a cut isolates, a
// clock's shift.
type faultChoice struct {
	kind          faultKind
	server, other int
	master        int
	offset        time.Duration
}

// chooseFault draws the next fault from rng, the seed's fault stream,
// which nothing else draws from: the faults of a seed and their order
// depend on the seed alone, not on the map the reshapes met.
func chooseFault(rng *rand.Rand, servers, masters int) faultChoice {
	f := faultChoice{server: rng.Intn(servers), kind: faultKind(rng.Intn(int(faultKinds)))}
	switch f.kind {
	case faultOneWay:
		f.other = (f.server + 1 + rng.Intn(servers-1)) % servers
	case faultIsolateMaster:
		f.master = rng.Intn(masters)
	case faultClock:
		f.offset = clockOffsets[rng.Intn(len(clockOffsets))]
	}
	return f
}

// faultSeed seeds a seed's fault stream apart from its other draws
// (reshapes, pauses): the same source would repeat its numbers there.
func faultSeed(seed int64) int64 { return seed ^ 0x5eed_fa17 }

// inject starts one fault chosen by rng (the seed's fault stream).
func inject(c *cluster, rng *rand.Rand) fault {
	f := chooseFault(rng, len(c.servers), len(c.masters))
	if d, ok := forcedClockOffset(); ok {
		return clockFault(c, c.rangeLeader(f.server), d)
	}
	ps := c.servers[f.server]
	switch f.kind {
	case faultKill:
		c.kill(ps)
		return fault{name: "kill -9 " + ps.name, heal: func() { c.start(ps) }}
	case faultTerminate:
		// A rolling restart's step: the server hands its leaderships off
		// and exits; it starts again at the heal.
		c.terminate(ps)
		return fault{name: "SIGTERM " + ps.name, heal: func() { c.start(ps) }}
	case faultStop:
		c.signal(ps, syscall.SIGSTOP)
		c.mark(ps.name, flagStopped, true)
		return fault{name: "SIGSTOP " + ps.name, heal: func() { c.signal(ps, syscall.SIGCONT); c.mark(ps.name, flagStopped, false) }}
	case faultKillMasterLeader:
		m := c.masterLeader()
		c.kill(m)
		return fault{name: "kill -9 master leader " + m.name, heal: func() { c.start(m) }}
	case faultIsolate:
		isolate(c, ps.name, true)
		return fault{name: "partition: " + ps.name + " cut off", heal: func() { isolate(c, ps.name, false) }}
	case faultOneWay:
		other := c.servers[f.other]
		c.net.setCut(ps.name, other.name, true)
		return fault{name: "one-way: " + ps.name + " cannot reach " + other.name, heal: func() { c.net.setCut(ps.name, other.name, false) }}
	case faultIsolateMaster:
		m := c.masters[f.master]
		isolate(c, m.name, true)
		return fault{name: "partition: master " + m.name + " cut off", heal: func() { isolate(c, m.name, false) }}
	case faultSlowDisk:
		return diskFault(c, ps, "slow fsync", "delay:150ms")
	case faultClock:
		return clockFault(c, ps, f.offset)
	default:
		return diskFault(c, ps, "failing fsync", "error")
	}
}

// diskPoint is the failpoint of the disk faults: the state file's commit.
const diskPoint = "partitionserver/fsm/commit"

// diskFault arms the state-file commit's failpoint on ps while it runs
// (a failing one makes ps stop itself at its next commit, as a server
// whose fsync fails must; reviveExited restarts it after the heal). The
// heal disarms it; a server that cannot be told is restarted, so no point
// stays armed into the next fault or the checks.
func diskFault(c *cluster, ps *role, what, action string) fault {
	name := what + " on " + ps.name
	if err := c.setFailpoint(ps, diskPoint, action); err != nil {
		name += " (not armed: " + err.Error() + ")"
	}
	return fault{name: name, heal: func() { c.disarm(ps) }}
}

// disarm disarms the disk and clock failpoints of r if it runs,
// restarting r when it does not answer.
func (c *cluster) disarm(r *role) {
	if r.failAddr == "" || (c.setFailpoint(r, diskPoint, "") == nil && c.setFailpoint(r, clockPoint, "") == nil) {
		return
	}
	c.mu.Lock()
	running := r.cmd != nil && !isClosed(r.done)
	c.mu.Unlock()
	if running {
		c.kill(r)
		c.start(r)
	}
}

func indexOf(rs []*role, r *role) int {
	for i, x := range rs {
		if x == r {
			return i
		}
	}
	return 0
}

// isolate cuts name off from every other role, both ways.
func isolate(c *cluster, name string, v bool) {
	c.mark(name, flagIsolated, v)
	for _, r := range c.all() {
		if r.name != name {
			c.net.setCut(name, r.name, v)
			c.net.setCut(r.name, name, v)
		}
	}
}

// masterLeader finds the leading master (else any).
func (c *cluster) masterLeader() *role {
	for i, addr := range c.masterDirect {
		mc, err := masterclient.New([]string{addr})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, _ := mc.Conn()
		_, err = pb.NewMasterServiceClient(conn).GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
		cancel()
		mc.Close()
		if err == nil {
			return c.masters[i]
		}
	}
	return c.masters[0]
}

// reshape asks the master for a split (in the range's Raft group or into
// a new one), merge, move or leadership transfer through ctl, with
// arguments that make sense for the current map.
func reshape(c *cluster, rng *rand.Rand, logf func(string, ...any)) {
	var args []string
	var rs []*pb.RangeDescriptor
	if pm, err := c.partitionMap(); err == nil {
		for _, r := range pm.GetRanges() {
			if r.GetTable() == table {
				rs = append(rs, r)
			}
		}
	}
	switch op := rng.Intn(4); {
	case op == 0 || len(rs) == 0:
		args = []string{"split", table, fmt.Sprintf("p%02d", 1+rng.Intn(dataPartitions-1))}
		if rng.Intn(2) == 0 {
			// Half the splits keep the new range in its group
			// (docs/range-groups.md); a move or transfer that picks
			// such a range moves it out of its group first.
			args = append(args, "--in-group")
		}
	case op == 3:
		r := rs[rng.Intn(len(rs))]
		reps := r.GetReplicas()
		args = []string{"transfer-leader", fmt.Sprint(r.GetRangeId()), "--to", reps[rng.Intn(len(reps))].GetServerId()}
	case op == 1 && len(rs) > 1:
		var merge []*pb.RangeDescriptor
		for _, r := range rs {
			if r.GetEnd() != "" {
				merge = append(merge, r)
			}
		}
		args = []string{"merge", fmt.Sprint(merge[rng.Intn(len(merge))].GetRangeId())}
	default:
		r := rs[rng.Intn(len(rs))]
		var free []string
		for _, s := range c.servers {
			held := false
			for _, rep := range r.GetReplicas() {
				held = held || rep.GetServerId() == s.name
			}
			if !held {
				free = append(free, s.name)
			}
		}
		if len(free) == 0 {
			return
		}
		args = []string{"move", fmt.Sprint(r.GetRangeId()), "--to", free[rng.Intn(len(free))]}
	}
	runCtl(c, args, logf)
}

// runCtl runs one ctl command in the background (the read-back waits for
// it) and logs its answer.
func runCtl(c *cluster, args []string, logf func(string, ...any)) {
	c.ctlRunning.Add(1)
	go func() {
		defer c.ctlRunning.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		defer cancel()
		out, err := c.ctl(ctx, args...)
		if err != nil {
			logf("ctl %s: %v %s", strings.Join(args, " "), err, strings.TrimSpace(out))
		} else {
			logf("ctl %s: ok", strings.Join(args, " "))
		}
	}()
}

// awaitAnchor waits until the master's spare anchor group (--table-groups)
// is started and led, so the workload's table is created as a span of
// it, not as a group of its own (a create takes today's path while no
// anchor has room).
func (c *cluster) awaitAnchor(logf func(string, ...any)) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if pm, err := c.partitionMap(); err == nil {
			for _, r := range pm.GetRanges() {
				if strings.HasPrefix(r.GetTable(), "_groups/") && pm.GetLeaders()[r.GetRangeId()] != "" {
					// The master takes tables once every server reported
					// its replica of the started anchor.
					time.Sleep(2 * time.Second)
					logf("anchor group %d led by %s", r.GetRangeId(), pm.GetLeaders()[r.GetRangeId()])
					return nil
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	return errors.New("chaos: --table-groups: no anchor group led within 60s")
}

func (c *cluster) partitionMap() (*pb.PartitionMap, error) {
	mc, err := masterclient.New(c.masterDirect)
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var pm *pb.PartitionMap
	err = mc.Call(ctx, func(ctx context.Context, m pb.MasterServiceClient) error {
		var err error
		pm, err = m.GetPartitionMap(ctx, &pb.GetPartitionMapRequest{})
		return err
	})
	return pm, err
}

// converge waits until every range of the table is led and each of its
// three replicas has applied what its leader has.
func converge(c *cluster, limit time.Duration) (time.Duration, bool, string) {
	start := time.Now()
	pool := connpool.New()
	defer pool.Close()
	why := ""
	for time.Since(start) < limit {
		if why = fullyReplicated(c, pool); why == "" {
			return time.Since(start), true, ""
		}
		time.Sleep(250 * time.Millisecond)
	}
	return limit, false, why
}

// fullyReplicated says why the table is not yet led and fully replicated
// ("" when it is).
func fullyReplicated(c *cluster, pool *connpool.Pool) string {
	pm, err := c.partitionMap()
	if err != nil {
		return fmt.Sprintf("no partition map: %v", err)
	}
	n := 0
	for _, r := range pm.GetRanges() {
		if r.GetTable() != table {
			continue
		}
		n++
		leader := pm.GetLeaders()[r.GetRangeId()]
		// Exactly three: the master finishes a move a failover
		// interrupted between adding the new voter and removing the old.
		if leader == "" || len(r.GetReplicas()) != 3 {
			return fmt.Sprintf("range %d: leader %q, %d replicas", r.GetRangeId(), leader, len(r.GetReplicas()))
		}
		var top uint64
		applied := map[string]uint64{}
		for _, rep := range r.GetReplicas() {
			cl, err := pool.Partition(c.serverDirect[rep.GetServerId()])
			if err != nil {
				return err.Error()
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := cl.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: r.GetRangeId()})
			cancel()
			if err != nil {
				return fmt.Sprintf("range %d on %s: %v", r.GetRangeId(), rep.GetServerId(), err)
			}
			if info.GetLeaderServerId() != leader {
				return fmt.Sprintf("range %d: %s follows %q, the map says %q", r.GetRangeId(), rep.GetServerId(), info.GetLeaderServerId(), leader)
			}
			applied[rep.GetServerId()] = info.GetStatus().GetAppliedIndex()
			top = max(top, info.GetStatus().GetAppliedIndex())
		}
		for s, a := range applied {
			if a+2 < top {
				return fmt.Sprintf("range %d: %s applied %d of %d", r.GetRangeId(), s, a, top)
			}
		}
	}
	if n == 0 {
		return "no range of the table in the map"
	}
	return ""
}

// verify reads the whole table back and compares it with what the
// clients were told.
func verify(tc *aztables.Client, w *workload, res *Result) error {
	seen := map[string]int{}
	vals := map[string]int64{}
	// Entities stamped after the read began: by a leader's clock ahead
	// (the clock fault), which moved its range's log clock with it.
	readAt := time.Now()
	var ahead int
	var mostAhead time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	top := int32(500)
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, raw := range page.Entities {
			var e map[string]any
			if err := json.Unmarshal(raw, &e); err != nil {
				return err
			}
			k := fmt.Sprint(e["PartitionKey"]) + "/" + fmt.Sprint(e["RowKey"])
			seen[k]++
			v, _ := parseInt(e["V"])
			vals[k] = v
			if ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(e["Timestamp"])); err == nil && ts.After(readAt) {
				ahead++
				mostAhead = max(mostAhead, ts.Sub(readAt))
			}
		}
	}
	if ahead > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d entities stamped after the read-back began, up to %v after", ahead, mostAhead.Round(time.Second)))
	}
	for k, n := range seen {
		if n > 1 {
			res.Duplicated++
			res.problem("%s seen %d times", k, n)
		}
	}
	check := func(k string, v int64, out outcome) {
		if out == applied {
			res.Acked++
		} else {
			res.Unknown++
		}
		if seen[k] == 0 {
			if out == applied {
				res.Lost++
				res.problem("acknowledged %s lost", k)
			}
			return
		}
		if vals[k] != v {
			res.WrongVal++
			res.problem("%s = %d, want %d", k, vals[k], v)
		}
	}
	for k, r := range w.inserts {
		check(k, r.value, r.out)
	}
	for _, b := range w.batches {
		present := 0
		for i, rk := range b.rks {
			k := b.pk + "/" + rk
			check(k, b.vals[i], b.out)
			if seen[k] > 0 {
				present++
			}
		}
		if present != 0 && present != len(b.rks) {
			res.BatchTorn++
			res.problem("batch %s/%s partly applied (%d of %d)", b.pk, b.rks[0], present, len(b.rks))
		}
	}
	for i := 0; i < counters; i++ {
		k := fmt.Sprintf("cnt%d/c", i)
		got := vals[k]
		res.Increments += w.incAcked[i]
		if got < int64(w.incAcked[i]) {
			res.LostUpdates++
			res.problem("counter %d = %d below its %d acknowledged increments", i, got, w.incAcked[i])
		}
		if got > int64(w.incAcked[i]+w.incUnknown[i]) {
			res.PhantomUpdates++
			res.problem("counter %d = %d above %d acknowledged + %d unknown increments", i, got, w.incAcked[i], w.incUnknown[i])
		}
	}
	return nil
}

// Summary is one line per result plus totals.
func Summary(rs []*Result) string {
	var b strings.Builder
	sort.Slice(rs, func(i, j int) bool { return rs[i].Seed < rs[j].Seed })
	var bad int
	var worstGap, worstMajority, worstBetween, worstConv time.Duration
	var acked, lost, dup, lu, lin, scans, scanBad int
	for _, r := range rs {
		status := "ok"
		if len(r.Notes) > 0 {
			status = "ok (" + strings.Join(r.Notes, "; ") + ")"
		}
		if !r.OK() {
			status = "FAIL: " + strings.Join(r.Problems[:min(3, len(r.Problems))], "; ")
			bad++
		}
		tables := ""
		if r.TablesOn {
			tables = "; " + tablesSummary(r.Tables)
		}
		fmt.Fprintf(&b, "seed %d: %d faults, %d acked (%d unknown), %d increments, %d history ops, %d scans (%d on the secondary, %d without LastSyncTime, lag up to %v; %d failed, %d pages, %d keys required, %d violations), %d connections cut, converged %v, max write gap %v (%s, ended t+%.1fs), waited with a majority up %v (%s, ended t+%.1fs, around: %s; between successes %v)%s: %s\n",
			r.Seed, len(r.Faults), r.Acked, r.Unknown, r.Increments, r.HistoryOps, r.Scans, r.ScansSecondary, r.ScansNoSync, r.SecondaryLag.Round(time.Millisecond), r.ScansFailed, r.ScanPages, r.ScanRequired, r.ScanViolations, r.Refused, r.Converged.Round(time.Millisecond), r.MaxGap.Round(time.Millisecond), r.MaxGapKey, r.MaxGapEnd.Seconds(),
			r.MajorityGap.Round(time.Millisecond), r.MajorityGapKey, r.MajorityGapEnd.Seconds(), strings.Join(r.MajorityGapFaults, ", "), r.MajorityGapBetween.Round(time.Millisecond), tables, status)
		worstGap = max(worstGap, r.MaxGap)
		worstMajority = max(worstMajority, r.MajorityGap)
		worstBetween = max(worstBetween, r.MajorityGapBetween)
		if r.ConvergedOK {
			worstConv = max(worstConv, r.Converged)
		}
		acked += r.Acked
		lost += r.Lost
		dup += r.Duplicated
		lu += r.LostUpdates
		scans += r.Scans
		scanBad += r.ScanViolations
		if !r.Linearizable {
			lin++
		}
	}
	fmt.Fprintf(&b, "%d seeds, %d failed: %d acknowledged entities, %d lost, %d duplicated, %d lost updates, %d non-linearizable histories, %d scans with %d violations; worst convergence %v, worst write gap %v, worst wait with a majority up %v (between successes %v)\n",
		len(rs), bad, acked, lost, dup, lu, lin, scans, scanBad, worstConv.Round(time.Millisecond), worstGap.Round(time.Millisecond), worstMajority.Round(time.Millisecond), worstBetween.Round(time.Millisecond))
	if total, on := sumTables(rs); on {
		fmt.Fprintf(&b, "%s\n", tablesSummary(total))
	}
	return b.String()
}

// faultSpan is one injected fault from injection to heal.
type faultSpan struct {
	name     string
	from, to time.Duration
	clockOn  string // a clock fault's server
}

// majorityGap sets the majority-up availability figure of res and names
// the faults within 3 s of the worst gap.
func majorityGap(res *Result, gaps []writeGap, events []roleEvent, places []placement, masters []string, faults []faultSpan) {
	var worst writeGap
	for _, g := range gaps {
		if d := majorityUpPart(g, events, places, masters); d > res.MajorityGap {
			res.MajorityGap, worst = d, g
		}
	}
	if res.MajorityGap == 0 {
		return
	}
	res.MajorityGapKey, res.MajorityGapEnd = worst.key, worst.to
	for _, f := range faults {
		if f.to+3*time.Second >= worst.from && f.from <= worst.to {
			res.MajorityGapFaults = append(res.MajorityGapFaults, fmt.Sprintf("t+%.1f-%.1fs %s", f.from.Seconds(), f.to.Seconds(), f.name))
		}
	}
}

// masterNames are the masters' role names.
func (c *cluster) masterNames() []string {
	var out []string
	for _, m := range c.masters {
		out = append(out, m.name)
	}
	return out
}

// watchPlacement polls the master's map every 500 ms (through the direct
// addresses, past the fault layer) until the returned function is called,
// which returns what it saw, relative to start.
func (c *cluster) watchPlacement(start time.Time) func() []placement {
	var (
		mu  sync.Mutex
		out []placement
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			if pm, err := c.partitionMap(); err == nil {
				p := placement{at: time.Since(start)}
				for _, r := range pm.GetRanges() {
					if r.GetTable() != table {
						continue
					}
					sp := span{start: r.GetStart(), end: r.GetEnd()}
					for _, rep := range r.GetReplicas() {
						sp.servers = append(sp.servers, rep.GetServerId())
					}
					p.ranges = append(p.ranges, sp)
				}
				for _, sv := range pm.GetServers() {
					if sv.GetClockSkewed() {
						p.skewed = append(p.skewed, sv.GetServerId())
					}
				}
				mu.Lock()
				out = append(out, p)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() []placement {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}
