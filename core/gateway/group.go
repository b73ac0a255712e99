package gateway

import "sync"

// group counts the goroutines of a session that must finish before its run
// is over (catalog fetches, calls on their way, process watchers, audit
// writes). Unlike a sync.WaitGroup, it may be added to while it is waited
// for, as long as something of it still runs (work started by work); once
// wait has begun and nothing is left, add refuses.
type group struct {
	mu     sync.Mutex
	n      int           // guarded by mu; goroutines running
	closed bool          // guarded by mu; wait has begun
	idle   chan struct{} // guarded by mu; closed when n drops to 0; nil while nobody waits
}

// add counts one more goroutine, to be ended by done; it reports false,
// counting nothing, when the group was waited for and nothing of it runs.
func (g *group) add() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed && g.n == 0 {
		return false
	}
	g.n++
	return true
}

func (g *group) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// goFunc runs f on its own goroutine, counted; it reports false, running
// nothing, when add refuses.
func (g *group) goFunc(f func()) bool {
	if !g.add() {
		return false
	}
	go func() {
		defer g.done()
		f()
	}()
	return true
}

// wait closes the group and returns once nothing of it runs.
func (g *group) wait() {
	g.mu.Lock()
	g.closed = true
	if g.n == 0 {
		g.mu.Unlock()
		return
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	<-idle
}
