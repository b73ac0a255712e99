package gateway

import "time"

// gate holds the agent's requests while a new epoch is identity-pending or
// its catalog is being fetched, and keeps the order of the messages it
// held: a message that comes while held ones are still being released
// queues behind them. The count of the messages held, and its bound
// (maxHeld), are the in-flight part's (inflight.enqueue).
//
// It is guarded by Session.mu: each method is called with it held.
type gate struct {
	isOpen bool          // agent requests flow
	opened chan struct{} // closed when the gate opens
	tail   chan struct{} // closed once the last message held went its way; nil while none was held
}

// newGate returns an open gate.
func newGate() gate {
	c := make(chan struct{})
	close(c)
	return gate{isOpen: true, opened: c}
}

// close holds the agent's requests from now on.
func (g *gate) close() {
	if g.isOpen {
		g.isOpen = false
		g.opened = make(chan struct{})
	}
}

// open lets held requests go.
func (g *gate) open() {
	if !g.isOpen {
		g.isOpen = true
		close(g.opened)
	}
}

// state returns whether the gate is open, and a channel closed when it
// opens.
func (g *gate) state() (bool, <-chan struct{}) { return g.isOpen, g.opened }

// inLine reports whether a message from the agent must queue behind held
// ones: the gate is closed, or held messages are still being released.
func (g *gate) inLine() bool { return !g.isOpen || g.releasing() }

// releasing reports whether held messages have not all gone their way yet.
func (g *gate) releasing() bool {
	if g.tail == nil {
		return false
	}
	select {
	case <-g.tail:
		return false
	default:
		return true
	}
}

// join puts one more message in line: it returns the channel closed when
// the message before it went its way (nil: none before), and done, which
// the caller closes once this one did.
func (g *gate) join() (prev <-chan struct{}, done chan struct{}) {
	done = make(chan struct{})
	if g.tail != nil {
		prev = g.tail
	}
	g.tail = done
	return prev, done
}

// maxHeld bounds the messages of one agent run held at the gate.
const maxHeld = 1000

// closeGateLocked holds the agent's requests from now on.
func (s *Session) closeGateLocked() { s.gate.close() }

// openGateLocked lets held requests go.
func (s *Session) openGateLocked() { s.gate.open() }

// inLineLocked reports whether a message from the agent must queue behind
// held ones (see queueLocked).
func (s *Session) inLineLocked() bool { return s.gate.inLine() }

// releasingLocked reports whether held messages have not all gone their
// way yet.
func (s *Session) releasingLocked() bool { return s.gate.releasing() }

// queueLocked runs deliver for an agent message held at the gate, in the
// order the agent sent it: once every message held before it went its way
// and the gate is open (a message delivered before may have closed it
// again: notifications/initialized starts the catalog fetch). expire runs
// instead when the wait outlasts timeout (0: no limit); the message keeps
// its place in line either way. It holds at most maxHeld messages: beyond,
// it returns false and holds nothing (an agent cannot pile up goroutines
// while the gate is closed).
func (s *Session) queueLocked(deliver, expire func(), timeout time.Duration) bool {
	return s.queueForLocked(deliver, expire, timeout, "")
}

// queueForLocked is queueLocked for a request of the agent's method: one
// that needs the epoch's identity (awaitsIdentityLocked) is delivered
// only once the gate is open and the identity of the epoch then current
// is known ("": a message that never waits for it).
func (s *Session) queueForLocked(deliver, expire func(), timeout time.Duration, method string) bool {
	if !s.flight.enqueue() {
		return false
	}
	prev, done := s.gate.join()
	ctx := s.ctx
	go func() {
		defer close(done)
		defer func() {
			s.mu.Lock()
			s.flight.release()
			s.mu.Unlock()
		}()
		var timer <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			timer = t.C
		}
		if prev != nil {
			select {
			case <-prev:
			case <-timer:
				expire()
				select { // the next message waits for those before this one
				case <-prev:
				case <-ctx.Done():
				}
				return
			case <-ctx.Done():
				return
			}
		}
		for {
			s.mu.Lock()
			open, opened := s.gate.state()
			var identity <-chan struct{}
			if open && method != "" {
				identity = s.awaitsIdentityLocked(method)
			}
			s.mu.Unlock()
			if open && identity == nil {
				deliver()
				return
			}
			if open {
				opened = identity // then the gate is looked at again
			}
			select {
			case <-opened:
			case <-timer:
				expire()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return true
}
