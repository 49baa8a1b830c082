package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/anishathalye/porcupine"
)

const (
	dataPartitions = 16 // p00..p15: unique inserts and batches
	counters       = 4  // cnt0..cnt3: If-Match increments
	registers      = 4  // reg0..reg3: the linearizability sample
)

// outcome of one write: applied, not applied, or unknown (an error after
// which the write may or may not have happened).
type outcome int

const (
	applied outcome = iota
	unknown
)

// workload drives the official SDK and records what it was told.
type workload struct {
	tc    *aztables.Client
	reg   *aztables.Client        // without SDK retries, for the register history
	sec   *aztables.ServiceClient // the read-access secondary endpoint, for scans
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup

	mu sync.Mutex
	// inserts: entity key -> value and outcome (acknowledged or unknown).
	inserts map[string]insertRec
	// batches: batch id -> its three keys and outcome.
	batches []batchRec
	// counters: acknowledged and unknown increments per counter.
	incAcked, incUnknown [counters]int
	history              []porcupine.Operation
	// lastWrite: per PartitionKey, the longest gap between successful
	// writes and when the last one returned.
	lastWrite map[string]time.Time
	maxGap    map[string]time.Duration
	gapEnd    map[string]time.Duration // when (since start) the longest gap ended
	gaps      []writeGap               // every gap of at least recordGap between successful writes
	wait      *waits                   // since when a write to each key is wanted (availability.go)
	waitGaps  []writeGap               // every wait of at least recordGap, for the majority-up figure
	writes    atomic.Int64
	failures  atomic.Int64

	// The scanners' bookkeeping (scan.go): every key a write was sent for
	// (set before it is sent) with its value, the keys a scan must return
	// in the order they became required, and what the scans found.
	attempted   map[string]int64
	confirmed   []confirmation
	isConfirmed map[string]bool // key confirmed: acknowledged (true) or returned by a scan
	scanSeq     int
	scans       scanStats
}

type insertRec struct {
	value int64
	out   outcome
}

type batchRec struct {
	pk   string
	rks  []string
	vals []int64
	out  outcome
}

// triesKey carries a per-call try counter through the SDK's pipeline.
type triesKey struct{}

// countTries counts the HTTP attempts of a call whose context carries a
// counter: a conditional update refused (412) on a retry may have applied
// on an earlier attempt whose answer was lost.
type countTries struct{}

func (countTries) Do(req *policy.Request) (*http.Response, error) {
	if n, ok := req.Raw().Context().Value(triesKey{}).(*atomic.Int32); ok {
		n.Add(1)
	}
	return req.Next()
}

// newClient is the SDK client with its usual retries, or (retries false)
// one try per call: an SDK retry of a write whose first attempt applied
// applies it again later, which a register history cannot tell from a
// lost or reordered write. The front-end's own retries are exactly-once.
func newClient(conn string, retries bool) (*aztables.ServiceClient, error) {
	opts := &aztables.ClientOptions{}
	opts.PerRetryPolicies = []policy.Policy{countTries{}}
	opts.Retry = policy.RetryOptions{MaxRetries: 6, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: time.Second, TryTimeout: 8 * time.Second}
	if !retries {
		opts.Retry = policy.RetryOptions{MaxRetries: -1, TryTimeout: 10 * time.Second}
	}
	return aztables.NewServiceClientFromConnectionString(conn, opts)
}

func startWorkload(tc, reg *aztables.Client, sec *aztables.ServiceClient) *workload {
	w := &workload{tc: tc, reg: reg, sec: sec, start: time.Now(), stop: make(chan struct{}), inserts: map[string]insertRec{},
		lastWrite: map[string]time.Time{}, maxGap: map[string]time.Duration{}, gapEnd: map[string]time.Duration{}, wait: newWaits(),
		attempted: map[string]int64{}, isConfirmed: map[string]bool{}}
	// setup created the counters before the workload started.
	w.mu.Lock()
	for i := 0; i < counters; i++ {
		k := fmt.Sprintf("cnt%d/c", i)
		w.attempted[k] = noValue
		w.confirmLocked(k, "created by setup", true)
	}
	w.mu.Unlock()
	for i := 0; i < 3; i++ {
		w.spawn(func() { w.insertLoop(i) })
	}
	w.spawn(w.batchLoop)
	for i := 0; i < 2; i++ {
		w.spawn(func() { w.counterLoop(i) })
	}
	for i := 0; i < 2; i++ {
		w.spawn(func() { w.registerLoop(i) })
	}
	for i := 0; i < 3; i++ {
		w.spawn(func() { w.scanLoop(i) })
	}
	return w
}

func (w *workload) spawn(f func()) {
	w.wg.Add(1)
	go func() { defer w.wg.Done(); f() }()
}

func (w *workload) halt() {
	close(w.stop)
	w.wg.Wait()
}

func (w *workload) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *workload) now() int64 { return int64(time.Since(w.start)) }

// succeeded notes a successful write to pk for the availability figures.
func (w *workload) succeeded(pk string) {
	w.writes.Add(1)
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	last, ok := w.lastWrite[pk]
	if !ok {
		last = w.start
	}
	g := now.Sub(last)
	if g > w.maxGap[pk] {
		w.maxGap[pk] = g
		w.gapEnd[pk] = now.Sub(w.start)
	}
	if g >= recordGap {
		w.gaps = append(w.gaps, writeGap{key: pk, from: last.Sub(w.start), to: now.Sub(w.start)})
	}
	w.lastWrite[pk] = now
	if wg, ok := w.wait.end(pk, now.Sub(w.start), true); ok && wg.to-wg.from >= recordGap {
		w.waitGaps = append(w.waitGaps, wg)
	}
}

// attempt notes that a write to pk starts.
func (w *workload) attempt(pk string) {
	w.mu.Lock()
	w.wait.begin(pk, time.Since(w.start))
	w.mu.Unlock()
}

// failed notes a write to pk that failed (its outcome may be unknown).
func (w *workload) failed(pk string) {
	w.failures.Add(1)
	w.mu.Lock()
	w.wait.end(pk, time.Since(w.start), false)
	w.mu.Unlock()
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func (w *workload) insertLoop(worker int) {
	for n := 0; !w.stopped(); n++ {
		pk := fmt.Sprintf("p%02d", (worker*5+n)%dataPartitions)
		rk := fmt.Sprintf("i%d-%07d", worker, n)
		v := int64(worker)<<40 | int64(n)
		body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(v), "V@odata.type": "Edm.Int64"})
		w.attemptKeys([]string{pk + "/" + rk}, []int64{v})
		w.attempt(pk)
		ctx, cancel := opCtx()
		_, err := w.tc.AddEntity(ctx, body, nil)
		cancel()
		rec := insertRec{value: v, out: applied}
		if err != nil {
			w.failed(pk)
			rec.out = unknown
		} else {
			w.succeeded(pk)
		}
		w.mu.Lock()
		w.inserts[pk+"/"+rk] = rec
		if rec.out == applied {
			w.acknowledgedLocked(pk + "/" + rk)
		}
		w.mu.Unlock()
	}
}

func (w *workload) batchLoop() {
	for n := 0; !w.stopped(); n++ {
		pk := fmt.Sprintf("p%02d", (n*3)%dataPartitions)
		b := batchRec{pk: pk}
		var actions []aztables.TransactionAction
		for j := 0; j < 3; j++ {
			rk := fmt.Sprintf("b%07d-%d", n, j)
			v := int64(1)<<50 | int64(n)<<4 | int64(j)
			body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": rk, "V": fmt.Sprint(v), "V@odata.type": "Edm.Int64"})
			actions = append(actions, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: body})
			b.rks, b.vals = append(b.rks, rk), append(b.vals, v)
		}
		keys := make([]string, len(b.rks))
		for j, rk := range b.rks {
			keys[j] = pk + "/" + rk
		}
		w.attemptKeys(keys, b.vals)
		w.attempt(pk)
		ctx, cancel := opCtx()
		_, err := w.tc.SubmitTransaction(ctx, actions, nil)
		cancel()
		b.out = applied
		if err != nil {
			w.failed(pk)
			b.out = unknown
		} else {
			w.succeeded(pk)
		}
		w.mu.Lock()
		w.batches = append(w.batches, b)
		if b.out == applied {
			w.acknowledgedLocked(keys...)
		}
		w.mu.Unlock()
	}
}

type counterEntity struct {
	V int64 `json:"V,string"`
}

// counterLoop increments a counter by read, then If-Match replace.
func (w *workload) counterLoop(worker int) {
	for n := 0; !w.stopped(); n++ {
		c := (worker + n) % counters
		pk := fmt.Sprintf("cnt%d", c)
		ctx, cancel := opCtx()
		resp, err := w.tc.GetEntity(ctx, pk, "c", nil)
		cancel()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var e map[string]any
		json.Unmarshal(resp.Value, &e)
		cur, _ := parseInt(e["V"])
		body, _ := json.Marshal(map[string]any{"PartitionKey": pk, "RowKey": "c", "V": fmt.Sprint(cur + 1), "V@odata.type": "Edm.Int64"})
		w.attempt(pk)
		ctx, cancel = opCtx()
		var tries atomic.Int32
		_, err = w.tc.UpdateEntity(context.WithValue(ctx, triesKey{}, &tries), body, &aztables.UpdateEntityOptions{IfMatch: to.Ptr(resp.ETag), UpdateMode: aztables.UpdateModeReplace})
		cancel()
		w.mu.Lock()
		switch {
		case err == nil:
			w.incAcked[c]++
		case statusOf(err) == http.StatusPreconditionFailed && tries.Load() <= 1:
		default:
			w.incUnknown[c]++
		}
		w.mu.Unlock()
		if err == nil {
			w.succeeded(pk)
		} else {
			w.failed(pk)
		}
	}
}

func parseInt(v any) (int64, bool) {
	var n int64
	switch x := v.(type) {
	case string:
		_, err := fmt.Sscan(x, &n)
		return n, err == nil
	case float64:
		return int64(x), true
	}
	return 0, false
}

// registerLoop writes and reads the sample keys, recording the history.
func (w *workload) registerLoop(client int) {
	for n := 0; !w.stopped(); n++ {
		key := fmt.Sprintf("reg%d", (client+n)%registers)
		if n%2 == 0 {
			v := client*10_000_000 + n
			call := w.now()
			body, _ := json.Marshal(map[string]any{"PartitionKey": key, "RowKey": "r", "V": v})
			w.attemptKeys([]string{key + "/r"}, []int64{noValue})
			w.attempt(key)
			ctx, cancel := opCtx()
			_, err := w.reg.UpsertEntity(ctx, body, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
			cancel()
			ret := w.now()
			if err != nil {
				ret = math.MaxInt64
				w.failed(key)
			} else {
				w.succeeded(key)
				w.mu.Lock()
				w.acknowledgedLocked(key + "/r")
				w.mu.Unlock()
			}
			w.record(porcupine.Operation{ClientId: client, Input: regInput{key: key, put: true, value: v}, Call: call, Output: regOutput{}, Return: ret})
			continue
		}
		call := w.now()
		ctx, cancel := opCtx()
		resp, err := w.reg.GetEntity(ctx, key, "r", nil)
		cancel()
		ret := w.now()
		out := regOutput{value: -1}
		switch {
		case err == nil:
			var e struct{ V int }
			if json.Unmarshal(resp.Value, &e) != nil {
				continue
			}
			out.value = e.V
		case statusOf(err) == http.StatusNotFound:
		default:
			continue
		}
		w.record(porcupine.Operation{ClientId: client, Input: regInput{key: key}, Call: call, Output: out, Return: ret})
	}
}

func (w *workload) record(op porcupine.Operation) {
	w.mu.Lock()
	w.history = append(w.history, op)
	w.mu.Unlock()
}

type regInput struct {
	key   string
	put   bool
	value int
}

type regOutput struct{ value int }

// registerModel: one register per key, starting absent (-1).
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(regInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return -1 },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(regInput)
		if in.put {
			return true, in.value
		}
		return output.(regOutput).value == state.(int), state
	},
	Equal: func(a, b interface{}) bool { return a == b },
	DescribeOperation: func(input, output interface{}) string {
		in := input.(regInput)
		if in.put {
			return fmt.Sprintf("put(%s, %d)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %d", in.key, output.(regOutput).value)
	},
}
