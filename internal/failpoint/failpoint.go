// Package failpoint owns named fault-injection points. Code calls Inject at
// the steps of a multi-step operation (a split, a merge); a crash test
// enables one point so the operation stops there, as if its process died,
// then restarts the process and checks the cluster recovers. Disabled
// points cost one atomic load.
//
// An offset point carries a duration instead of a failure: code reads it
// with Offset (a shifted clock: partitionserver/clock/offset). It costs
// one atomic load while no offset point is armed, whatever else is.
package failpoint

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInjected is what an enabled point returns by default.
var ErrInjected = errors.New("failpoint: injected failure")

var (
	armed  atomic.Int32
	mu     sync.Mutex
	points = map[string]func() error{}

	// offsetsArmed counts the armed offset points, apart from armed: a
	// clock read on every write stays one atomic load while a disk
	// failpoint is armed.
	offsetsArmed atomic.Int32
	offsets      = map[string]time.Duration{}
)

// Enable arms the point name; fn decides what Inject returns (nil fn:
// ErrInjected). An offset point of that name is disarmed.
func Enable(name string, fn func() error) {
	if fn == nil {
		fn = func() error { return ErrInjected }
	}
	mu.Lock()
	if _, ok := points[name]; !ok {
		armed.Add(1)
	}
	points[name] = fn
	dropOffsetLocked(name)
	mu.Unlock()
}

// EnableOffset arms the offset point name with d: Offset(name) returns
// it until Disable(name). A failure point of that name is disarmed.
// Re-arming with another duration replaces it with no moment at 0.
func EnableOffset(name string, d time.Duration) {
	mu.Lock()
	if _, ok := offsets[name]; !ok {
		offsetsArmed.Add(1)
	}
	offsets[name] = d
	dropPointLocked(name)
	mu.Unlock()
}

// Offset returns the duration the offset point name is armed with, or 0.
func Offset(name string) time.Duration {
	if offsetsArmed.Load() == 0 {
		return 0
	}
	mu.Lock()
	defer mu.Unlock()
	return offsets[name]
}

// Disable disarms the point name, a failure or an offset point.
func Disable(name string) {
	mu.Lock()
	dropPointLocked(name)
	dropOffsetLocked(name)
	mu.Unlock()
}

func dropPointLocked(name string) {
	if _, ok := points[name]; ok {
		delete(points, name)
		armed.Add(-1)
	}
}

func dropOffsetLocked(name string) {
	if _, ok := offsets[name]; ok {
		delete(offsets, name)
		offsetsArmed.Add(-1)
	}
}

// Inject returns the armed point's error, or nil.
func Inject(name string) error {
	if armed.Load() == 0 {
		return nil
	}
	mu.Lock()
	fn := points[name]
	mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn()
}
