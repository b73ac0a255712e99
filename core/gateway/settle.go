package gateway

import (
	"fmt"
	"time"

	"github.com/portcullis/portcullis/core/control"
)

// A launcher that hands its own stdin to whichever worker runs (nodemon,
// node --watch; identity.Launcher.Relays) reads a call written to it while
// it swaps its worker and gives it to the new one: a call decided on the
// old epoch's grant would run on new code, before the person approved it.
// The build watcher sees the edit, but a moment after the launcher may: a
// call that carries authority is therefore written to such a server only
// while its watched source is settled (Options.SourceUnsettled: no change
// seen and not settled, no watched file that differs on disk from when it
// was last seen, and no build hold of the session). Otherwise it waits,
// holding the gate closed as a build does; once the source settled it goes
// to the epoch it was decided on if that epoch still answers, and is
// refused (not sent) when the build measured other code, so that the
// agent's next call is decided on the new epoch and waits for the person.
// The wait is bounded by HoldTimeout: a source written to without pause
// never settles, and the call is refused saying so (docs/TRUST.md, "A
// relaying watcher's last call").

// carriesAuthority reports whether a call forwarded with decision carries
// authority: a grant or a person's decision (not an allow policy), or
// credentials the server holds.
func (s *Session) carriesAuthority(decision string) bool {
	return decision != decisionAllow || len(s.opts.Credentials) > 0
}

// sourceState reads whether e's source is settled: unsettled is the
// watcher's channel (nil: settled), held the session's build hold on e
// (closed when it ends; nil: none), gone that e will not answer a call any
// more (ended, not current, or superseded by a settled build).
func (s *Session) sourceState(e *epoch) (unsettled, held <-chan struct{}, gone bool) {
	unsettled = s.opts.SourceUnsettled()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.buildHold != nil {
		held = s.buildDone
	}
	return unsettled, held, e.ended || e.superseded || s.cur != e
}

// sourceSettled reports whether a call forwarded with decision may be
// written to e now as far as the server's source goes: it carries no
// authority, the server runs behind no relaying launcher, or its source
// is settled.
func (s *Session) sourceSettled(e *epoch, decision string) bool {
	if s.opts.SourceUnsettled == nil || !s.carriesAuthority(decision) {
		return true
	}
	unsettled, held, gone := s.sourceState(e)
	return unsettled == nil && held == nil && !gone
}

// sendSettled sends call c (reserved as id, its intent recorded as rec) to
// e once the server's source has settled, checking e's tree again after
// the wait, or refuses it (not sent) as awaitSource says.
func (s *Session) sendSettled(e *epoch, c *toolCall, id int64, p *pending, rec *callRecord, auth authorization) {
	for {
		if r := s.awaitSource(e, c.name); r != nil {
			s.notSent(e, c, id, p, rec, r)
			return
		}
		if r := s.checkTree(e, c.name, auth.decision); r != nil {
			s.notSent(e, c, id, p, rec, r)
			return
		}
		if s.sourceSettled(e, auth.decision) {
			s.transmit(id, p, auth.out)
			return
		}
	}
}

// awaitSource waits until e's source is settled (nil), at most
// HoldTimeout; it returns the refusal of a call decided on e when e will
// not answer it (a settled build measured other code, or e ended), when
// the source did not settle in time, or when the run ends. While the
// watcher reports a change the session's gate is closed as at a build's
// first event (BuildStarted), so that no other call passes meanwhile.
func (s *Session) awaitSource(e *epoch, tool string) *control.Refusal {
	timeout := s.opts.HoldTimeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		unsettled, held, gone := s.sourceState(e)
		if gone {
			return &control.Refusal{Error: control.EpochEnded, Server: s.opts.Label, Tool: tool, Epoch: string(e.ID),
				Reason: "the server's source changed while the call waited to be sent, and the code that would answer it is not the code the call was approved for; the call was not sent",
				Retry:  fmt.Sprintf("call %s again: it will wait for the person to approve the new code", tool)}
		}
		wait := held
		if unsettled != nil {
			s.BuildStarted("a file the server runs from")
			wait = unsettled
		}
		if wait == nil {
			return nil
		}
		s.log.Info("call held: the server's source is changing behind a launcher that relays its stdin", "epoch", e.ID, "tool", tool)
		select {
		case <-wait:
		case <-timer.C:
			return sourceChanging(s.opts.Label, tool, string(e.ID), timeout)
		case <-s.ctx.Done():
			s.mu.Lock()
			r := s.unavailableLocked()
			s.mu.Unlock()
			return r
		}
	}
}

// sourceChanging is the refusal of a request held because the server's
// source changed and did not settle within timeout.
func sourceChanging(label, tool, epoch string, timeout time.Duration) *control.Refusal {
	return &control.Refusal{Error: control.HoldTimeout, Server: label, Tool: tool, CurrentEpoch: epoch,
		Reason: fmt.Sprintf("the server's source is changing: files it runs from changed and did not settle within %s, so the request was not sent", timeout),
		Retry:  "call again when the edit is finished"}
}
