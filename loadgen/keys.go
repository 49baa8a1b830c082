package loadgen

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"
)

// KeyGen picks the PartitionKey of each write for one scenario. One KeyGen
// serves a whole run; Worker gives each worker goroutine its own picker so
// the hot path takes no lock (the append scenario's shared clock is one
// atomic).
type KeyGen interface {
	// Worker returns a picker drawing from r; it must not be shared between
	// goroutines.
	Worker(r *rand.Rand) func() string
}

// HotPartitionKey is the one PartitionKey of the hot-partition scenario.
const HotPartitionKey = "hot"

// NewKeyGen returns the generator of scenario. partitions and zipfS shape
// uniform and zipf; clock drives append (time.Now if nil).
func NewKeyGen(scenario string, partitions int, zipfS float64, clock func() time.Time) (KeyGen, error) {
	if partitions < 1 {
		return nil, fmt.Errorf("%w: partitions must be at least 1", ErrInvalidConfig)
	}
	switch scenario {
	case ScenarioUniform:
		return uniformKeys{n: partitions, width: keyWidth(partitions)}, nil
	case ScenarioHotPartition:
		return hotKeys{}, nil
	case ScenarioAppend:
		if clock == nil {
			clock = time.Now
		}
		return &appendKeys{now: clock}, nil
	case ScenarioAppendHashed:
		if clock == nil {
			clock = time.Now
		}
		return &hashedAppendKeys{appendKeys: appendKeys{now: clock}, buckets: partitions, width: keyWidth(partitions)}, nil
	case ScenarioMovingHot:
		if clock == nil {
			clock = time.Now
		}
		return movingHotKeys{n: partitions, width: keyWidth(partitions), now: clock, start: clock()}, nil
	case ScenarioZipf:
		if zipfS <= 1 {
			return nil, fmt.Errorf("%w: zipf exponent must be greater than 1", ErrInvalidConfig)
		}
		return zipfKeys{n: partitions, s: zipfS, width: keyWidth(partitions)}, nil
	}
	return nil, fmt.Errorf("%w: unknown scenario %q", ErrInvalidConfig, scenario)
}

// keyWidth zero-pads key numbers to one width so that the ordinal order of
// PartitionKeys (the order ranges split in) is their numeric order.
func keyWidth(n int) int { return max(4, len(strconv.Itoa(n-1))) }

// partitionKey names partition i of a numbered scenario: p0000, p0001, ...
func partitionKey(i, width int) string { return fmt.Sprintf("p%0*d", width, i) }

type uniformKeys struct{ n, width int }

func (u uniformKeys) Worker(r *rand.Rand) func() string {
	return func() string { return partitionKey(r.IntN(u.n), u.width) }
}

type hotKeys struct{}

func (hotKeys) Worker(*rand.Rand) func() string {
	return func() string { return HotPartitionKey }
}

// zipfKeys draws key ranks from a Zipf distribution: rank 0 (p0000) is the
// hottest, and ranks stay in key order, so the hot keys sit at the start of
// the table's key space.
type zipfKeys struct {
	n, width int
	s        float64
}

func (z zipfKeys) Worker(r *rand.Rand) func() string {
	d := rand.NewZipf(r, z.s, 1, uint64(z.n-1))
	return func() string { return partitionKey(int(d.Uint64()), z.width) }
}

// appendKeys is the prepend/append anti-pattern: the PartitionKey is the
// current time in milliseconds, zero-padded, so every write goes to the
// newest key, at the end of the key space. Keys never go backwards even if
// the clock does or two workers race: each key is at least the last one
// handed out.
type appendKeys struct {
	now  func() time.Time
	last atomic.Int64
}

// appendKeyDigits pads Unix milliseconds (13 digits until the year 2286)
// so ordinal and numeric order agree.
const appendKeyDigits = 15

func (a *appendKeys) Worker(*rand.Rand) func() string { return a.next }

func (a *appendKeys) next() string {
	t := a.now().UnixMilli()
	for {
		prev := a.last.Load()
		if t <= prev {
			t = prev
			break
		}
		if a.last.CompareAndSwap(prev, t) {
			break
		}
	}
	return fmt.Sprintf("%0*d", appendKeyDigits, t)
}

// hashedAppendKeys is the fix of the append anti-pattern from the table
// design guide: the time-ordered key gets a bucket prefix ("b07-<ms>"), so
// writes of one moment spread over buckets the master can split apart,
// while a reader can still scan a time window with one query per bucket.
type hashedAppendKeys struct {
	appendKeys
	buckets, width int
}

func (h *hashedAppendKeys) Worker(r *rand.Rand) func() string {
	return func() string { return fmt.Sprintf("b%0*d-%s", h.width, r.IntN(h.buckets), h.next()) }
}

// Moving hot spot: hotShare of the requests go to a window of
// 1/hotWindows of the key space, which moves to the next window every
// hotPeriod; the rest are uniform.
const (
	hotShare   = 0.9
	hotWindows = 8
	hotPeriod  = 15 * time.Second
)

type movingHotKeys struct {
	n, width int
	now      func() time.Time
	start    time.Time
}

func (m movingHotKeys) Worker(r *rand.Rand) func() string {
	return func() string {
		if r.Float64() >= hotShare {
			return partitionKey(r.IntN(m.n), m.width)
		}
		size := max(1, m.n/hotWindows)
		w := int(m.now().Sub(m.start)/hotPeriod) % hotWindows
		return partitionKey(min(m.n-1, w*size+r.IntN(size)), m.width)
	}
}
