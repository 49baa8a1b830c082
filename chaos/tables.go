package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tablestore/internal/connpool"
	"tablestore/internal/rangegroup"
	pb "tablestore/proto/tablestorepb"
)

// The tables workload (-chaos.tables N): beside the one big table, a few
// clients keep about N small tables live, creating tables of unique names,
// inserting a handful of entities into each, and deleting one now and
// then, while the faults and reshapes run (with --table-groups the tables
// are spans of shared anchor groups, so a move, kill or delete of one meets
// the others). What each client was told is recorded; checkTables compares
// it with the front-end, the master's map and the partition servers once
// everything is healed.

// tableWorkers is how many clients create and delete tables.
const tableWorkers = 3

// smallTable is one table of the tables workload and what its client was
// told.
type smallTable struct {
	name    string
	created outcome // applied: the create was acknowledged (or answered 409 after a retry)
	// deleteTried: a delete was sent; deleted is its outcome, deletedAt
	// when it was acknowledged.
	deleteTried bool
	deleted     outcome
	deletedAt   time.Time
	// rows: "pk/rk" -> outcome of its insert (every value is the key's
	// rowValue).
	rows map[string]outcome
	// ranges: the range ids the master's map gave the table while it
	// lived, and the Raft groups that served them.
	ranges map[uint64]uint64
}

// tablesWorkload drives the small tables.
type tablesWorkload struct {
	sc     *aztables.ServiceClient
	once   *aztables.ServiceClient // one try per call: half the creates and deletes, so some answers are lost
	c      *cluster
	seed   int64
	target int
	start  time.Time
	stop   chan struct{}
	wg     sync.WaitGroup
	logf   func(string, ...any)

	mu     sync.Mutex
	tables []*smallTable
	// problems seen during the run (a deleted table that answered a
	// query), reported with the end's.
	problems []string
	// notes: answers that are not violations but worth a look (an insert
	// into a live table answered TableNotFound).
	notFoundInserts int
	probes          atomic.Int64
	// sharing: the most tables the map showed in one Raft group at a
	// sample, and the groups that ever served two tables or more.
	maxShare     int
	sharedGroups map[uint64]bool
	// spansAtCreate: tables the map showed as a span of another range's
	// group right after their create.
	spansAtCreate int
}

// startTables starts the tables workload's clients.
func startTables(sc, once *aztables.ServiceClient, c *cluster, seed int64, target int, logf func(string, ...any)) *tablesWorkload {
	tw := &tablesWorkload{sc: sc, once: once, c: c, seed: seed, target: target, start: time.Now(), stop: make(chan struct{}), logf: logf, sharedGroups: map[uint64]bool{}}
	for i := range tableWorkers {
		share := target / tableWorkers
		if i < target%tableWorkers {
			share++
		}
		tw.wg.Add(1)
		go func() { defer tw.wg.Done(); tw.loop(i, share) }()
	}
	return tw
}

func (tw *tablesWorkload) halt() {
	close(tw.stop)
	tw.wg.Wait()
}

func (tw *tablesWorkload) stopped() bool {
	select {
	case <-tw.stop:
		return true
	default:
		return false
	}
}

// loop is one client: it owns its tables (no other client touches them),
// keeps share of them live, and between creates and deletes inserts into
// a live one and queries one it deleted (which must answer 404).
func (tw *tablesWorkload) loop(worker, share int) {
	rng := rand.New(rand.NewSource(tw.seed*131 + int64(worker)))
	var live, gone []*smallTable
	for n := 0; !tw.stopped(); n++ {
		// Half the creates and deletes are sent once, without the SDK's
		// retries, and given up after 1-3 s: a fault (or a slow master)
		// then loses their answers, and the table must end one way or
		// the other.
		cl, limit := tw.sc, 30*time.Second
		if rng.Intn(2) == 0 {
			cl, limit = tw.once, time.Duration(1000+rng.Intn(2000))*time.Millisecond
		}
		switch {
		case len(live) < share:
			t := tw.create(cl, limit, fmt.Sprintf("t%dw%dn%d", tw.seed, worker, n), 3+rng.Intn(4))
			if t.created == applied {
				live = append(live, t)
			}
		case rng.Intn(3) == 0:
			i := rng.Intn(len(live))
			t := live[i]
			live = append(live[:i], live[i+1:]...)
			if tw.remove(cl, limit, t) {
				gone = append(gone, t)
			}
		default:
			tw.insert(live[rng.Intn(len(live))], 2)
		}
		if len(gone) > 0 {
			tw.probe(gone[rng.Intn(len(gone))])
		}
		select {
		case <-tw.stop:
		case <-time.After(time.Duration(50+rng.Intn(150)) * time.Millisecond):
		}
	}
}

// create creates table name (the SDK retries; a 409 after a retry is the
// first try's create, the name being unique) and inserts rows entities.
func (tw *tablesWorkload) create(cl *aztables.ServiceClient, limit time.Duration, name string, rows int) *smallTable {
	t := &smallTable{name: name, created: unknown, rows: map[string]outcome{}, ranges: map[uint64]uint64{}}
	tw.mu.Lock()
	tw.tables = append(tw.tables, t)
	tw.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	var tries atomic.Int32
	_, err := cl.CreateTable(context.WithValue(ctx, triesKey{}, &tries), name, nil)
	cancel()
	switch {
	case err == nil:
	case statusOf(err) == http.StatusConflict && tries.Load() > 1:
	case statusOf(err) == http.StatusConflict:
		tw.problem("create of new table %s answered 409 on its first try", name)
		return t
	default:
		tw.logf("seed %d: create table %s: outcome unknown: %v", tw.seed, name, shortErr(err))
		return t
	}
	tw.mu.Lock()
	t.created = applied
	tw.mu.Unlock()
	tw.sampleMap(t)
	tw.insert(t, rows)
	return t
}

// insert adds n entities of unique keys to t.
func (tw *tablesWorkload) insert(t *smallTable, n int) {
	tc := tw.sc.NewClient(t.name)
	for range n {
		tw.mu.Lock()
		k := len(t.rows)
		pk, rk := fmt.Sprintf("p%d", k%2), fmt.Sprintf("r%04d", k)
		t.rows[pk+"/"+rk] = unknown
		tw.mu.Unlock()
		body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(rowValue(t.name, pk, rk)), "V@odata.type": "Edm.Int64"})
		ctx, cancel := opCtx()
		_, err := tc.AddEntity(ctx, body, nil)
		cancel()
		tw.mu.Lock()
		if err == nil {
			t.rows[pk+"/"+rk] = applied
		} else if errorCode(err) == "TableNotFound" {
			tw.notFoundInserts++
		}
		tw.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// remove deletes t, reporting whether the delete was acknowledged (a 404
// after a retry is the first try's delete; on the first try it means the
// table was lost).
func (tw *tablesWorkload) remove(cl *aztables.ServiceClient, limit time.Duration, t *smallTable) bool {
	tw.sampleMap(t)
	tw.mu.Lock()
	t.deleteTried, t.deleted = true, unknown
	tw.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	var tries atomic.Int32
	_, err := cl.DeleteTable(context.WithValue(ctx, triesKey{}, &tries), t.name, nil)
	cancel()
	switch {
	case err == nil:
	case statusOf(err) == http.StatusNotFound && tries.Load() > 1:
	case statusOf(err) == http.StatusNotFound:
		tw.problem("table %s (create acknowledged, never deleted) was not found by its delete", t.name)
		return false
	default:
		tw.logf("seed %d: delete table %s: outcome unknown: %v", tw.seed, t.name, shortErr(err))
		return false
	}
	tw.mu.Lock()
	t.deleted, t.deletedAt = applied, time.Now()
	tw.mu.Unlock()
	return true
}

// probe queries a table whose delete was acknowledged: any page of it is
// a resurrection (a 404 is the answer; other errors say nothing).
func (tw *tablesWorkload) probe(t *smallTable) {
	tw.probes.Add(1)
	n, err := queryOnce(tw.sc.NewClient(t.name))
	if err == nil {
		tw.problem("deleted table %s answered a query (%d entities) %v after its delete was acknowledged", t.name, n, time.Since(t.deletedAt).Round(time.Millisecond))
	}
}

// queryOnce asks for one page of the table.
func queryOnce(tc *aztables.Client) (int, error) {
	top := int32(5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
	page, err := pager.NextPage(ctx)
	return len(page.Entities), err
}

// sampleMap records t's ranges and their groups from the master's map, and
// how many tables the groups served.
func (tw *tablesWorkload) sampleMap(t *smallTable) {
	pm, err := tw.c.partitionMap()
	if err != nil {
		return
	}
	byGroup := tablesByGroup(pm)
	tw.mu.Lock()
	defer tw.mu.Unlock()
	for _, r := range pm.GetRanges() {
		if r.GetTable() == t.name {
			if len(t.ranges) == 0 && !t.deleteTried && rangegroup.GroupOf(r) != r.GetRangeId() {
				tw.spansAtCreate++
			}
			t.ranges[r.GetRangeId()] = rangegroup.GroupOf(r)
		}
	}
	for g, ts := range byGroup {
		tw.maxShare = max(tw.maxShare, len(ts))
		if len(ts) > 1 {
			tw.sharedGroups[g] = true
		}
	}
}

// tablesByGroup is the small tables (not the anchors' or the main
// table) each Raft group serves a range of.
func tablesByGroup(pm *pb.PartitionMap) map[uint64]map[string]bool {
	out := map[uint64]map[string]bool{}
	for _, r := range pm.GetRanges() {
		if strings.HasPrefix(r.GetTable(), "_groups/") || r.GetTable() == table {
			continue
		}
		g := rangegroup.GroupOf(r)
		if out[g] == nil {
			out[g] = map[string]bool{}
		}
		out[g][r.GetTable()] = true
	}
	return out
}

func (tw *tablesWorkload) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	tw.logf("seed %d: tables: %s", tw.seed, msg)
	tw.mu.Lock()
	tw.problems = append(tw.problems, msg)
	tw.mu.Unlock()
}

// rowValue is the V an entity of the tables workload is written with.
func rowValue(table, pk, rk string) int64 {
	var h int64 = 17
	for _, b := range []byte(table + "/" + pk + "/" + rk) {
		h = h*31 + int64(b)
	}
	return h & (1<<50 - 1)
}

// errorCode is the Azure error code of err ("" when it has none).
func errorCode(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

// shortErr is err's first line.
func shortErr(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// reshapeTables asks for a move or a leadership transfer of a live small
// table's range (with --table-groups: of its group, whole), beside the
// main table's reshapes.
func (tw *tablesWorkload) reshapeTables(rng *rand.Rand) {
	pm, err := tw.c.partitionMap()
	if err != nil {
		return
	}
	var rs []*pb.RangeDescriptor
	for _, r := range pm.GetRanges() {
		if n := r.GetTable(); n != table && !strings.HasPrefix(n, "_groups/") {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return
	}
	r := rs[rng.Intn(len(rs))]
	tw.logf("seed %d: tables: reshaping table %s's range %d (group %d)", tw.seed, r.GetTable(), r.GetRangeId(), rangegroup.GroupOf(r))
	reps := r.GetReplicas()
	args := []string{"transfer-leader", fmt.Sprint(r.GetRangeId()), "--to", reps[rng.Intn(len(reps))].GetServerId()}
	if rng.Intn(2) == 0 {
		var free []string
		for _, s := range tw.c.servers {
			held := false
			for _, rep := range reps {
				held = held || rep.GetServerId() == s.name
			}
			if !held {
				free = append(free, s.name)
			}
		}
		if len(free) > 0 {
			args = []string{"move", fmt.Sprint(r.GetRangeId()), "--to", free[rng.Intn(len(free))]}
		}
	}
	runCtl(tw.c, args, tw.logf)
}

// tableFindings are the counts checkTables adds to a Result.
type tableFindings struct {
	Created, CreateUnknown   int
	Deleted, DeleteUnknown   int
	Rows, RowsUnknown        int
	RowsLost, RowsDuplicated int
	RowsWrong                int // unknown key or wrong value
	TablesLost               int // acknowledged, never deleted, not found
	Resurrected              int // delete acknowledged, answered later
	RangesLeft               int // ranges of deleted tables in the map or on a server
	Inconsistent             int // query, table list and map disagree
	Unread                   int // no definite answer by the deadline
	// Tables whose create or delete went unknown, there at the end or not.
	UnknownThere, UnknownGone int
	Probes                    int64
	NotFoundInserts           int
	// Sharing: Raft groups that served two tables or more at some sample,
	// the most tables one served, and at the end the groups of the live
	// tables by how many tables each served ("3x1 1x12": three groups of
	// one table, one of twelve).
	SharedGroups, MaxShare int
	EndGroups              string
	SpansAtCreate          int // tables created as a span of a shared group
	// Joined: group-join events in the masters' log (a table's own group
	// taken into a shared one: attach-cold, ctl group-tables).
	Joined int
}

// tableState is what the cluster says of one table at the end.
type tableState struct {
	exists   bool // the query answered (else 404 TableNotFound)
	listed   bool // Query Tables lists it
	inMap    bool // the master's map has it
	ranges   int  // ranges of it in the map
	keys     map[string]int
	wrongVal []string
	err      error // no definite answer
}

// checkTables checks every table of the workload once the faults are
// healed, polling until the answers agree or the deadline passes.
func checkTables(tw *tablesWorkload, res *Result, limit time.Duration) {
	f := &res.Tables
	tw.mu.Lock()
	tables := append([]*smallTable(nil), tw.tables...)
	f.Probes, f.NotFoundInserts = tw.probes.Load(), tw.notFoundInserts
	f.SharedGroups, f.MaxShare, f.SpansAtCreate = len(tw.sharedGroups), tw.maxShare, tw.spansAtCreate
	for _, p := range tw.problems {
		if strings.Contains(p, "answered a query") {
			f.Resurrected++
		}
		if strings.Contains(p, "not found by its delete") {
			f.TablesLost++
		}
		res.problem("tables: %s", p)
	}
	tw.mu.Unlock()
	for _, t := range tables {
		tallyTable(f, t)
	}
	round, findings := lastRound(limit, time.Second, func(r *tableFindings) []string { return tw.checkOnce(tables, r) })
	f.addRound(round)
	for _, p := range findings {
		res.problem("tables: %s", p)
	}
	if pm, err := tw.c.partitionMap(); err == nil {
		f.EndGroups = groupHistogram(tablesByGroup(pm))
	}
	if events, err := tw.c.masterEvents(); err == nil {
		for _, e := range events {
			if e.GetKind() == pb.EventKind_EVENT_KIND_GROUP_JOIN {
				f.Joined++
			}
		}
	}
	tw.logf("seed %d: tables: %+v", tw.seed, *f)
}

// lastRound runs check every pause until it finds nothing or limit has
// passed, and returns the last round's counts and findings (a round
// counts into a fresh tableFindings: earlier rounds only decide whether
// to ask again).
func lastRound(limit, pause time.Duration, check func(*tableFindings) []string) (tableFindings, []string) {
	deadline := time.Now().Add(limit)
	for {
		var round tableFindings
		findings := check(&round)
		if len(findings) == 0 || time.Now().After(deadline) {
			return round, findings
		}
		time.Sleep(pause)
	}
}

// addRound adds the counts of the check's last round.
func (f *tableFindings) addRound(r tableFindings) {
	f.RowsLost += r.RowsLost
	f.RowsDuplicated += r.RowsDuplicated
	f.RowsWrong += r.RowsWrong
	f.TablesLost += r.TablesLost
	f.Resurrected += r.Resurrected
	f.RangesLeft += r.RangesLeft
	f.Inconsistent += r.Inconsistent
	f.Unread += r.Unread
	f.UnknownThere += r.UnknownThere
	f.UnknownGone += r.UnknownGone
}

// tallyTable counts what t's client was told.
func tallyTable(f *tableFindings, t *smallTable) {
	switch {
	case t.created != applied:
		f.CreateUnknown++
		return
	case t.deleteTried && t.deleted == applied:
		f.Deleted++
	case t.deleteTried:
		f.DeleteUnknown++
	}
	f.Created++
	for _, out := range t.rows {
		if out == applied {
			f.Rows++
		} else {
			f.RowsUnknown++
		}
	}
}

// checkOnce reads every table and compares, counting into f (a round's
// own: checkTables keeps the last round's).
func (tw *tablesWorkload) checkOnce(tables []*smallTable, f *tableFindings) []string {
	listed, err := tw.listTables()
	if err != nil {
		return []string{fmt.Sprintf("query tables: %v", shortErr(err))}
	}
	pm, err := tw.c.partitionMap()
	if err != nil {
		return []string{fmt.Sprintf("master's map: %v", err)}
	}
	inMap := map[string]bool{}
	for _, t := range pm.GetTables() {
		inMap[t.GetName()] = true
	}
	ranges := map[string]int{}
	for _, r := range pm.GetRanges() {
		ranges[r.GetTable()]++
	}
	var out []string
	for _, t := range tables {
		st := tw.readTable(t.name)
		st.listed, st.inMap, st.ranges = listed[t.name], inMap[t.name], ranges[t.name]
		out = append(out, judgeTable(t, st, f)...)
	}
	out = append(out, tw.serversHoldDeleted(tables, pm, f)...)
	return out
}

// listTables is the set of tables Query Tables lists.
func (tw *tablesWorkload) listTables() (map[string]bool, error) {
	out := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pager := tw.sc.NewListTablesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range page.Tables {
			if t.Name != nil {
				out[*t.Name] = true
			}
		}
	}
	return out, nil
}

// readTable queries a whole table.
func (tw *tablesWorkload) readTable(name string) tableState {
	st := tableState{keys: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	top := int32(4)
	pager := tw.sc.NewClient(name).NewListEntitiesPager(&aztables.ListEntitiesOptions{Top: &top})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			if statusOf(err) == http.StatusNotFound && errorCode(err) == "TableNotFound" && len(st.keys) == 0 {
				return st
			}
			st.err = err
			return st
		}
		st.exists = true
		for _, raw := range page.Entities {
			var e map[string]any
			if err := json.Unmarshal(raw, &e); err != nil {
				st.err = err
				return st
			}
			pk, rk := fmt.Sprint(e["PartitionKey"]), fmt.Sprint(e["RowKey"])
			st.keys[pk+"/"+rk]++
			if v, _ := parseInt(e["V"]); v != rowValue(name, pk, rk) {
				st.wrongVal = append(st.wrongVal, fmt.Sprintf("%s/%s V=%d", pk, rk, v))
			}
		}
	}
	st.exists = true // an empty table answers one empty page
	return st
}

// judgeTable compares one table's end state with what its client was
// told.
func judgeTable(t *smallTable, st tableState, f *tableFindings) []string {
	count := func(p *int) { *p++ }
	if st.err != nil {
		count(&f.Unread)
		return []string{fmt.Sprintf("table %s: no answer: %s", t.name, shortErr(st.err))}
	}
	var out []string
	if st.exists != st.listed || st.exists != st.inMap || st.exists != (st.ranges > 0) {
		count(&f.Inconsistent)
		out = append(out, fmt.Sprintf("table %s: query found it %v, Query Tables listed it %v, the map has it %v with %d ranges", t.name, st.exists, st.listed, st.inMap, st.ranges))
	}
	mustExist := t.created == applied && !t.deleteTried
	mustBeGone := t.deleteTried && t.deleted == applied
	if !mustExist && !mustBeGone {
		// A create or delete whose answer was lost: which way it went.
		if st.exists {
			f.UnknownThere++
		} else {
			f.UnknownGone++
		}
	}
	switch {
	case mustBeGone && st.exists:
		count(&f.Resurrected)
		return append(out, fmt.Sprintf("table %s: its delete was acknowledged %s ago, and it answers with %d entities", t.name, time.Since(t.deletedAt).Round(time.Second), len(st.keys)))
	case mustExist && !st.exists:
		count(&f.TablesLost)
		return append(out, fmt.Sprintf("table %s: create acknowledged, never deleted, not found (%d acknowledged rows)", t.name, acked(t)))
	case !st.exists:
		return out
	}
	for k, out0 := range t.rows {
		switch n := st.keys[k]; {
		case n == 0 && out0 == applied:
			count(&f.RowsLost)
			out = append(out, fmt.Sprintf("table %s: acknowledged %s lost", t.name, k))
		case n > 1:
			count(&f.RowsDuplicated)
			out = append(out, fmt.Sprintf("table %s: %s seen %d times", t.name, k, n))
		}
	}
	for k := range st.keys {
		if _, ok := t.rows[k]; !ok {
			count(&f.RowsWrong)
			out = append(out, fmt.Sprintf("table %s: %s was never written", t.name, k))
		}
	}
	for _, w := range st.wrongVal {
		count(&f.RowsWrong)
		out = append(out, fmt.Sprintf("table %s: wrong value %s", t.name, w))
	}
	return out
}

func acked(t *smallTable) int {
	n := 0
	for _, o := range t.rows {
		if o == applied {
			n++
		}
	}
	return n
}

// serversHoldDeleted asks every partition server for the ranges the
// deleted tables had (and the map for any left): a deleted table's
// replicas must all go.
func (tw *tablesWorkload) serversHoldDeleted(tables []*smallTable, pm *pb.PartitionMap, f *tableFindings) []string {
	pool := connpool.New()
	defer pool.Close()
	var out []string
	for _, t := range tables {
		if !t.deleteTried || t.deleted != applied {
			continue
		}
		for id := range t.ranges {
			for _, r := range pm.GetRanges() {
				if r.GetRangeId() == id {
					out = append(out, fmt.Sprintf("table %s (deleted): the map still has range %d (table %q)", t.name, id, r.GetTable()))
				}
			}
			for _, s := range tw.c.servers {
				if held := hostsRange(pool, tw.c.serverDirect[s.name], id); held != "" {
					out = append(out, fmt.Sprintf("table %s (deleted): range %d on %s: %s", t.name, id, s.name, held))
				}
			}
		}
	}
	f.RangesLeft += len(out)
	return out
}

// hostsRange says how a server answers for a range ("" when it does not
// host it).
func hostsRange(pool *connpool.Pool, addr string, id uint64) string {
	cl, err := pool.Partition(addr)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := cl.RangeInfo(ctx, &pb.RangeInfoRequest{RangeId: id})
	if status.Code(err) == codes.NotFound {
		return ""
	}
	if err != nil {
		return "no answer: " + err.Error()
	}
	return fmt.Sprintf("hosted (applied %d, leader %q)", info.GetStatus().GetAppliedIndex(), info.GetLeaderServerId())
}

// groupHistogram is "groups x tables" of byGroup, largest first.
func groupHistogram(byGroup map[uint64]map[string]bool) string {
	hist := map[int]int{}
	for _, ts := range byGroup {
		hist[len(ts)]++
	}
	var sizes []int
	for n := range hist {
		sizes = append(sizes, n)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
	var parts []string
	for _, n := range sizes {
		parts = append(parts, fmt.Sprintf("%dx%d", hist[n], n))
	}
	return strings.Join(parts, " ")
}

// tablesSummary is the tables workload's part of a summary line.
func tablesSummary(f tableFindings) string {
	return fmt.Sprintf("tables: %d created (%d unknown), %d deleted (%d unknown; of the unknown %d there at the end, %d gone), %d rows acked (%d unknown), %d lost, %d duplicated, %d wrong, %d tables lost, %d resurrected (%d probes), %d ranges left, %d inconsistent, %d unread, %d inserts answered TableNotFound; %d created as a span of a shared group, %d joined one later, %d groups shared, up to %d tables in one, groups x tables at the end %s",
		f.Created, f.CreateUnknown, f.Deleted, f.DeleteUnknown, f.UnknownThere, f.UnknownGone, f.Rows, f.RowsUnknown, f.RowsLost, f.RowsDuplicated, f.RowsWrong, f.TablesLost, f.Resurrected, f.Probes, f.RangesLeft, f.Inconsistent, f.Unread, f.NotFoundInserts, f.SpansAtCreate, f.Joined, f.SharedGroups, f.MaxShare, f.EndGroups)
}

// sumTables adds up the tables workload's findings of the seeds that ran
// it (on: some did); the end's groups are each seed's, joined.
func sumTables(rs []*Result) (tableFindings, bool) {
	var t tableFindings
	var on bool
	var ends []string
	for _, r := range rs {
		if !r.TablesOn {
			continue
		}
		on = true
		f := r.Tables
		t.Created += f.Created
		t.CreateUnknown += f.CreateUnknown
		t.Deleted += f.Deleted
		t.DeleteUnknown += f.DeleteUnknown
		t.Rows += f.Rows
		t.RowsUnknown += f.RowsUnknown
		t.RowsLost += f.RowsLost
		t.RowsDuplicated += f.RowsDuplicated
		t.RowsWrong += f.RowsWrong
		t.TablesLost += f.TablesLost
		t.Resurrected += f.Resurrected
		t.RangesLeft += f.RangesLeft
		t.Inconsistent += f.Inconsistent
		t.Unread += f.Unread
		t.UnknownThere += f.UnknownThere
		t.UnknownGone += f.UnknownGone
		t.Probes += f.Probes
		t.NotFoundInserts += f.NotFoundInserts
		t.SharedGroups += f.SharedGroups
		t.SpansAtCreate += f.SpansAtCreate
		t.Joined += f.Joined
		t.MaxShare = max(t.MaxShare, f.MaxShare)
		ends = append(ends, fmt.Sprintf("seed %d: %s", r.Seed, f.EndGroups))
	}
	t.EndGroups = strings.Join(ends, ", ")
	return t, on
}
