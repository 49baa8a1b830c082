// Package failpoint owns named fault-injection points. Code calls Inject at
// the steps of a multi-step operation (a split, a merge); a crash test
// enables one point so the operation stops there, as if its process died,
// then restarts the process and checks the cluster recovers. Disabled
// points cost one atomic load.
package failpoint

import (
	"errors"
	"sync"
	"sync/atomic"
)

// ErrInjected is what an enabled point returns by default.
var ErrInjected = errors.New("failpoint: injected failure")

var (
	armed  atomic.Int32
	mu     sync.Mutex
	points = map[string]func() error{}
)

// Enable arms the point name; fn decides what Inject returns (nil fn:
// ErrInjected).
func Enable(name string, fn func() error) {
	if fn == nil {
		fn = func() error { return ErrInjected }
	}
	mu.Lock()
	if _, ok := points[name]; !ok {
		armed.Add(1)
	}
	points[name] = fn
	mu.Unlock()
}

// Disable disarms the point name.
func Disable(name string) {
	mu.Lock()
	if _, ok := points[name]; ok {
		delete(points, name)
		armed.Add(-1)
	}
	mu.Unlock()
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
