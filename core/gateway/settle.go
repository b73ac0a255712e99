package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
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
			return &control.Refusal{Error: control.EpochEnded, Server: s.opts.Label, Tool: tool, Epoch: e.ID,
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
			return sourceChanging(s.opts.Label, tool, e.ID, timeout)
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
func sourceChanging(label, tool string, epoch ids.EpochID, timeout time.Duration) *control.Refusal {
	return &control.Refusal{Error: control.HoldTimeout, Server: label, Tool: tool, CurrentEpoch: epoch,
		Reason: fmt.Sprintf("the server's source is changing: files it runs from changed and did not settle within %s, so the request was not sent", timeout),
		Retry:  fmt.Sprintf("call again once the edit is finished; if no one is editing %s's files, the server itself keeps writing among them: tell the person, who can mark those files as data (portcullis servers edit %s --ignore PATTERN)", label, label)}
}

// The other side of the race: a call written while the source was settled
// can still be in the launcher's buffer when the source changes, and be
// read by the new worker. Its answer is suspect: a change that began after
// the call was sent and before its answer (a build hold, the watcher's
// report, or a settled build that measured other code) has the supervisor
// check the tree before the answer is passed on. When the tree changed,
// the new epoch is taken over as an observed one and the answer is
// recorded as a late answer of the code that runs now, never passed on.
// On Linux the writer of each answer is known besides (supervisor
// Options.HoldNewCode), which records the same.

// suspectSentLocked marks the tools/calls sent on the current epoch, whose
// answer has not come, as suspect (a build began).
func (s *Session) suspectSentLocked() {
	if s.opts.SourceUnsettled == nil {
		return
	}
	for _, p := range s.flight.pending {
		if p.ep == s.cur && p.method == methodToolsCall && !p.unsent {
			p.suspect = true
		}
	}
}

// suspectAnswer checks, before the answer m to tools/call p on e is passed
// on, whether the server's source changed since p was sent; if so, e's
// tree is checked, and a change found is taken over (observed) and m
// recorded as a late answer, never passed on: it reports true then. A
// check that cannot be made leaves the answer to pass, as it is without
// a relaying launcher (logged).
func (s *Session) suspectAnswer(e *epoch, p *pending, m *mcpwire.Message) bool {
	unsettled := s.opts.SourceUnsettled()
	s.mu.Lock()
	suspect := p.suspect || e.superseded || unsettled != nil
	s.mu.Unlock()
	if !suspect {
		return false
	}
	tw, ok := e.Proc.(treeWatcher)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(s.ctx, treeCheckTimeout)
	defer cancel()
	ch, err := tw.CheckTree(ctx)
	switch {
	case err != nil && !errors.Is(err, supervisor.ErrTreeUnwatched):
		s.log.Warn("an answer that came while the server's source changed could not be checked; passed on", "epoch", e.ID, "tool", p.tool, "err", err)
		return false
	case ch == nil:
		return false
	}
	s.log.Warn("an answer came while the server's source changed, and its tree changed: the answer is the new code's", "epoch", e.ID, "tool", p.tool, "what", strings.Join(ch.What, "; "))
	s.observed(*ch) // ends e: the agent is told epoch_ended, and p is kept as a late call
	s.mu.Lock()
	if e.answeredBy == nil {
		if o := answererOf(ch); o != nil {
			e.answeredBy = &audit.Answerer{Epoch: ch.Epoch, PID: o.PID, Exe: o.Exe, SHA256: o.SHA256, Script: o.Script, ScriptSHA256: o.ScriptSHA256}
		}
	}
	s.mu.Unlock()
	return s.lateAnswer(m)
}

// answererOf names the process that ran when ch was observed: the one
// whose output made it, else the first process of the new tree that the
// old one lacked, else the first of the new tree.
func answererOf(ch *supervisor.TreeChange) *identity.Observed {
	if ch.Answered != nil {
		return ch.Answered
	}
	for i, o := range ch.New {
		if !slices.ContainsFunc(ch.Old, func(old identity.Observed) bool { return old.PID == o.PID && old.StartTime == o.StartTime }) {
			return &ch.New[i]
		}
	}
	if len(ch.New) > 0 {
		return &ch.New[0]
	}
	return nil
}
