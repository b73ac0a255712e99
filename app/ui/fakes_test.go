package ui

import (
	"fmt"
	"slices"
	"sync"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/ids"
)

// fakeApprovals is a hand-written Approvals: requests are set by the test,
// decisions recorded.
type fakeApprovals struct {
	mu      sync.Mutex
	pending []authz.Request // guarded by mu
	decided []decision      // guarded by mu
	ch      chan authz.Event
	refuse  error // guarded by mu; Decide of an approval returns it (an unrecordable grant)
	// refuseInput is guarded by mu: DecideInput of an input of that
	// origin returns the error and decides nothing.
	refuseInput map[daemon.InputOrigin]error
	inputs      []daemon.WindowInput // guarded by mu: the presses DecideInput was given
}

type decision struct {
	ID string
	authz.Decision
}

var _ Approvals = (*fakeApprovals)(nil)

func newFakeApprovals(reqs ...authz.Request) *fakeApprovals {
	return &fakeApprovals{pending: reqs, ch: make(chan authz.Event, 16)}
}

func (f *fakeApprovals) Subscribe() (<-chan authz.Event, func()) { return f.ch, func() {} }

func (f *fakeApprovals) Pending() []authz.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pending)
}

func (f *fakeApprovals) Decide(id ids.RequestID, d authz.Decision) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.pending, func(r authz.Request) bool { return string(r.ID) == string(id) })
	if i < 0 {
		return fmt.Errorf("%w: %s", authz.ErrNoRequest, id)
	}
	f.pending = slices.Delete(f.pending, i, i+1)
	f.decided = append(f.decided, decision{string(id), d})
	if d.Choice != authz.Deny {
		return f.refuse
	}
	return nil
}

// DecideInput is Decide with the press recorded; an input f.refuseInput
// names (by origin) is refused as the daemon refuses it, the request left
// pending.
func (f *fakeApprovals) DecideInput(id ids.RequestID, d authz.Decision, in daemon.WindowInput) error {
	f.mu.Lock()
	refuse := f.refuseInput[in.Origin]
	f.mu.Unlock()
	if refuse != nil {
		return refuse
	}
	f.mu.Lock()
	f.inputs = append(f.inputs, in)
	f.mu.Unlock()
	return f.Decide(id, d)
}

func (f *fakeApprovals) decisions() []decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.decided)
}

// fakeDaemon is a hand-written Daemon whose status the test sets.
type fakeDaemon struct {
	mu       sync.Mutex
	rep      daemon.StatusReport // guarded by mu
	restarts []string            // guarded by mu
	ch       chan struct{}
}

var _ Daemon = (*fakeDaemon)(nil)

func newFakeDaemon() *fakeDaemon { return &fakeDaemon{ch: make(chan struct{}, 1)} }

func (f *fakeDaemon) Status() daemon.StatusReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rep
}

func (f *fakeDaemon) Changes() (<-chan struct{}, func()) { return f.ch, func() {} }

func (f *fakeDaemon) Restart(label, why string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restarts = append(f.restarts, label)
	return 1
}

// set changes the status and signals a change, as the daemon does.
func (f *fakeDaemon) set(rep daemon.StatusReport) {
	f.mu.Lock()
	f.rep = rep
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
}

// fakeNotifier records notifications with their click handlers, and the
// keys withdrawn.
type fakeNotifier struct {
	mu        sync.Mutex
	sent      []sentNotification // guarded by mu
	withdrawn []string           // guarded by mu
	added     chan struct{}
}

type sentNotification struct {
	Key, Title, Body string
	click            func()
}

var _ Notifier = (*fakeNotifier)(nil)

func (f *fakeNotifier) Notify(key, title, body string, onClick func()) error {
	f.mu.Lock()
	f.sent = append(f.sent, sentNotification{key, title, body, onClick})
	f.mu.Unlock()
	select {
	case f.added <- struct{}{}:
	default:
	}
	return nil
}

func (f *fakeNotifier) Withdraw(key string) error {
	f.mu.Lock()
	f.withdrawn = append(f.withdrawn, key)
	f.mu.Unlock()
	return nil
}

func (f *fakeNotifier) withdrawals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.withdrawn)
}

func (f *fakeNotifier) all() []sentNotification {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

// authorityApprovals is a real authority as the window's Approvals, the
// press of an approval not considered (tests of timeouts and events).
type authorityApprovals struct{ *authz.Authority }

func (a authorityApprovals) DecideInput(id ids.RequestID, d authz.Decision, _ daemon.WindowInput) error {
	return a.Decide(id, d)
}
