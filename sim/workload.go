package sim

import (
	"math"
	"math/rand"
	"sort"
	"time"
)

// keySpace is the size of the simulated key space; a PartitionKey is a
// position in it, written as 8 hex digits.
const keySpace = 1 << 32

// segment is a part of the key space with a load weight per unit of key
// space (the uniform base has weight 1).
type segment struct {
	lo, hi uint64
	weight float64
}

// shape is a piecewise-constant load density over the key space,
// normalised to a total mass of 1: cum[i] is the mass below xs[i].
type shape struct {
	xs  []uint64
	cum []float64
}

// newShape builds the density of a uniform base plus extra segments.
func newShape(extra []segment) *shape {
	points := map[uint64]bool{0: true, keySpace: true}
	for _, s := range extra {
		points[s.lo], points[s.hi] = true, true
	}
	xs := make([]uint64, 0, len(points))
	for x := range points {
		xs = append(xs, x)
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	weight := make([]float64, len(xs)-1)
	for i := range weight {
		weight[i] = 1
	}
	for _, s := range extra {
		i := sort.Search(len(xs), func(i int) bool { return xs[i] >= s.lo })
		for ; i < len(weight) && xs[i] < s.hi; i++ {
			weight[i] += s.weight
		}
	}
	cum := make([]float64, len(xs))
	for i, w := range weight {
		cum[i+1] = cum[i] + w*float64(xs[i+1]-xs[i])
	}
	total := cum[len(cum)-1]
	for i := range cum {
		cum[i] /= total
	}
	return &shape{xs: xs, cum: cum}
}

func (s *shape) cdf(x uint64) float64 {
	i := sort.Search(len(s.xs), func(i int) bool { return s.xs[i] > x }) - 1
	if i >= len(s.xs)-1 {
		return 1
	}
	f := float64(x-s.xs[i]) / float64(s.xs[i+1]-s.xs[i])
	return s.cum[i] + f*(s.cum[i+1]-s.cum[i])
}

// mass is the share of the load on [lo, hi).
func (s *shape) mass(lo, hi uint64) float64 { return s.cdf(hi) - s.cdf(lo) }

// workload is the offered load over time: a total rate, its distribution
// over the key space, and optionally one hot key (append).
type workload struct {
	cfg   Config
	base  float64 // total entities/s of the uniform base at the start
	shape *shape
	// extra is the entities/s the shape carries beyond the base.
	extra float64
	// point is a single hot PartitionKey with pointRate entities/s.
	point     uint64
	pointRate float64
	started   bool
}

func newWorkload(cfg Config, rng *rand.Rand) *workload {
	w := &workload{cfg: cfg, base: float64(cfg.Ranges) * cfg.RangeLoad, shape: newShape(nil)}
	if cfg.Workload == "zipf" {
		w.zipf(rng)
	}
	return w
}

// rangeSlot is the key-space width of one initial range.
func (w *workload) rangeSlot() uint64 { return keySpace / uint64(w.cfg.Ranges) }

// zipf makes the load of the i-th hottest range (at random places) exceed
// the base by 100 x range-load / i^1.1.
func (w *workload) zipf(rng *rand.Rand) {
	slot := w.rangeSlot()
	n := min(w.cfg.Ranges, 10000)
	var segs []segment
	extra := 0.0
	for k, idx := range rng.Perm(w.cfg.Ranges)[:n] {
		rate := 100 * w.cfg.RangeLoad / math.Pow(float64(k+1), 1.1)
		lo := uint64(idx) * slot
		segs = append(segs, segment{lo: lo, hi: lo + slot, weight: rate / w.cfg.RangeLoad})
		extra += rate
	}
	w.shape, w.extra = newShape(segs), extra
}

// advance applies the workload's event at time t; it reports whether the
// shape changed (range masses must be recomputed).
func (w *workload) advance(t time.Duration, rng *rand.Rand) bool {
	if w.started || t < w.cfg.EventAt {
		return false
	}
	w.started = true
	switch w.cfg.Workload {
	case "hot-partition":
		slot := w.rangeSlot()
		n := uint64(math.Ceil(w.cfg.HotShare * float64(w.cfg.Ranges)))
		first := uint64(rng.Int63n(int64(uint64(w.cfg.Ranges) - n + 1)))
		seg := segment{lo: first * slot, hi: (first + n) * slot, weight: w.cfg.HotFactor - 1}
		w.shape = newShape([]segment{seg})
		w.extra = w.base * float64(seg.hi-seg.lo) / keySpace * seg.weight
		return true
	case "append":
		// Monotonic PartitionKeys: every write lands on the newest key,
		// which moves towards the end of the key space (see pointAt).
		w.point, w.pointRate = keySpace-w.rangeSlot(), 20*w.cfg.HotFactor*w.cfg.RangeLoad
		return true
	}
	return false
}

// pointAt is the newest key at t: it advances through the last initial
// range's key space over the rest of the run.
func (w *workload) pointAt(t time.Duration) uint64 {
	if w.pointRate == 0 || t <= w.cfg.EventAt {
		return w.point
	}
	f := float64(t-w.cfg.EventAt) / float64(w.cfg.Duration-w.cfg.EventAt+1)
	return w.point + uint64(f*float64(keySpace-1-w.point))
}

// total is the entities/s the shape carries at t (diurnal: a day is the
// simulated duration, from half to one and a half times the base).
func (w *workload) total(t time.Duration) float64 {
	tot := w.base + w.extra
	if w.cfg.Workload == "diurnal" {
		phase := 2 * math.Pi * float64(t) / float64(w.cfg.Duration)
		tot *= 1 - 0.5*math.Cos(phase)
	}
	return tot
}
