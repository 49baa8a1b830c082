package partitionserver

import (
	"sort"
	"sync"
	"time"

	pb "tablestore/proto/tablestorepb"
)

// maxTrackedKeys bounds the per-window key map: past it, new keys are only
// counted as distinct, so a scan over millions of keys costs no memory.
const maxTrackedKeys = 4096

// keyMeter measures the load per PartitionKey over one report window. The
// busiest keys with their rates are the load-weighted sample the master uses
// to choose a split key and to tell one hot key from a hot range.
type keyMeter struct {
	mu        sync.Mutex
	cur       map[string]float64
	distinct  int
	throttled int
	start     time.Time
	// nServed and servedTime sum the window's successful requests and the
	// time they took, for the mean latency.
	nServed    int
	servedTime time.Duration
	// busy counts the window's requests refused for server capacity.
	busy         int
	serviceStart time.Time
}

func newKeyMeter() *keyMeter {
	now := time.Now()
	return &keyMeter{cur: make(map[string]float64), start: now, serviceStart: now}
}

func (m *keyMeter) add(pk string, n int) {
	m.mu.Lock()
	if _, ok := m.cur[pk]; ok || len(m.cur) < maxTrackedKeys {
		if !ok {
			m.distinct++
		}
		m.cur[pk] += float64(n)
	} else {
		m.distinct++ // an overestimate once the map is full; fine for a report
	}
	m.mu.Unlock()
}

// served counts one successful request that took d.
func (m *keyMeter) served(d time.Duration) {
	m.mu.Lock()
	m.nServed++
	m.servedTime += d
	m.mu.Unlock()
}

// refusedBusy counts one request refused for server capacity.
func (m *keyMeter) refusedBusy() {
	m.mu.Lock()
	m.busy++
	m.mu.Unlock()
}

// rollService returns the mean latency in milliseconds of the requests
// served since the last call (0 without any) and the requests refused for
// server capacity per second since then, and starts over at now.
func (m *keyMeter) rollService(now time.Time) (latencyMs, busyPerSec float64) {
	m.mu.Lock()
	n, d, busy, elapsed := m.nServed, m.servedTime, m.busy, now.Sub(m.serviceStart)
	m.nServed, m.servedTime, m.busy, m.serviceStart = 0, 0, 0, now
	m.mu.Unlock()
	if n > 0 {
		latencyMs = float64(d) / float64(n) / float64(time.Millisecond)
	}
	if elapsed > 0 {
		busyPerSec = float64(busy) / elapsed.Seconds()
	}
	return latencyMs, busyPerSec
}

func (m *keyMeter) throttle() {
	m.mu.Lock()
	m.throttled++
	m.mu.Unlock()
}

// roll closes the window and returns its busiest keys by rate, a
// load-weighted sample of top keys in key order (see loadSample), the number
// of distinct keys and the throttled requests per second.
func (m *keyMeter) roll(top int) (hot, sample []*pb.KeyLoad, distinct int, throttledPerSec float64) {
	m.mu.Lock()
	cur, distinct, throttled, start := m.cur, m.distinct, m.throttled, m.start
	m.cur, m.distinct, m.throttled, m.start = make(map[string]float64, len(cur)), 0, 0, time.Now()
	m.mu.Unlock()
	secs := time.Since(start).Seconds()
	if secs <= 0 {
		secs = 1
	}
	all := make([]*pb.KeyLoad, 0, len(cur))
	for k, v := range cur {
		all = append(all, &pb.KeyLoad{PartitionKey: k, EntitiesPerSec: v / secs})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].PartitionKey < all[j].PartitionKey })
	sample = loadSample(all, top)
	hot = append([]*pb.KeyLoad(nil), all...)
	sort.SliceStable(hot, func(i, j int) bool { return hot[i].EntitiesPerSec > hot[j].EntitiesPerSec })
	if len(hot) > top {
		hot = hot[:top]
	}
	return hot, sample, distinct, float64(throttled) / secs
}

// loadSample reduces keys (in key order) to at most n entries at even steps
// of cumulative load, each carrying the load since the previous entry: the
// weighted median of the sample is the key that halves the range's load,
// whatever the number of keys. A key with most of the load crosses many
// steps at once and appears once with that weight.
func loadSample(keys []*pb.KeyLoad, n int) []*pb.KeyLoad {
	if len(keys) <= n {
		return keys
	}
	total := 0.0
	for _, k := range keys {
		total += k.GetEntitiesPerSec()
	}
	if total <= 0 {
		return nil
	}
	step := total / float64(n)
	var out []*pb.KeyLoad
	acc, emitted := 0.0, 0.0
	for _, k := range keys {
		acc += k.GetEntitiesPerSec()
		if acc >= emitted+step || k == keys[len(keys)-1] {
			out = append(out, &pb.KeyLoad{PartitionKey: k.GetPartitionKey(), EntitiesPerSec: acc - emitted})
			emitted = acc
		}
	}
	return out
}

// throttle is a token bucket per PartitionKey: Azure serves one partition up
// to a fixed rate and answers 503 ServerBusy beyond it.
type throttle struct {
	rate float64
	mu   sync.Mutex
	bkts map[string]*bucket
	last time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newThrottle(rate float64) *throttle {
	return &throttle{rate: rate, bkts: make(map[string]*bucket), last: time.Now()}
}

// allow takes n tokens for pk, or says how long until they would be there.
func (t *throttle) allow(pk string, n int, now time.Time) (bool, time.Duration) {
	if t == nil || t.rate <= 0 {
		return true, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Forget idle keys now and then so the map stays small.
	if now.Sub(t.last) > 10*time.Second {
		for k, b := range t.bkts {
			if now.Sub(b.at) > 10*time.Second {
				delete(t.bkts, k)
			}
		}
		t.last = now
	}
	b, ok := t.bkts[pk]
	if !ok {
		b = &bucket{tokens: t.rate, at: now}
		t.bkts[pk] = b
	}
	b.tokens = min(t.rate, b.tokens+now.Sub(b.at).Seconds()*t.rate)
	b.at = now
	need := float64(n)
	if b.tokens >= need || (b.tokens >= t.rate && need > t.rate) {
		b.tokens -= need
		return true, 0
	}
	wait := time.Duration((need - b.tokens) / t.rate * float64(time.Second))
	return false, max(wait, 10*time.Millisecond)
}
