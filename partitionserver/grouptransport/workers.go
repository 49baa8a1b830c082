package grouptransport

import "sync/atomic"

// maxIdleWorkers bounds the goroutines a transport keeps for running inbox
// drains; more drains at once still get goroutines of their own.
const maxIdleWorkers = 32

// workers runs short tasks (an inbox's drain: most often one heartbeat or
// one AppendEntries) on goroutines kept for the next task. A goroutine per
// task started with a small stack that grew again for every message:
// under point reads, goroutine creation, stack growth and exit were ~10 %
// of a follower's CPU, which answers one heartbeat per leadership round.
type workers struct {
	tasks   chan func()
	stop    <-chan struct{}
	started atomic.Int32
}

func newWorkers(stop <-chan struct{}) *workers {
	return &workers{tasks: make(chan func()), stop: stop}
}

// run hands fn to an idle worker, starts a kept worker while fewer than
// maxIdleWorkers exist, or else runs fn on a goroutine of its own.
func (w *workers) run(fn func()) {
	select {
	case w.tasks <- fn:
		return
	default:
	}
	if w.started.Add(1) <= maxIdleWorkers {
		go w.loop(fn)
		return
	}
	w.started.Add(-1)
	go fn()
}

// loop runs fn, then whatever it is handed next, until the transport
// closes.
func (w *workers) loop(fn func()) {
	for {
		fn()
		select {
		case fn = <-w.tasks:
		case <-w.stop:
			w.started.Add(-1)
			return
		}
	}
}
