package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/supervisor"
)

// Epochs observed by the supervisor (docs/DESIGN.md "The refresh contract"):
// a watcher that owns the stdio pipe and swaps its worker (nodemon, a shell
// loop), or an exec in the server's tree, is a new execution epoch on the
// same process and the same pipe. The session then does what a replacement
// does, without a new launch: the gate closes (identity pending), grants of
// the old epoch are void, the calls in flight are answered epoch_ended, the
// handshake is replayed when a new program reads the requests, the catalog
// is fetched again and the agent is told (list_changed); server_replaced is
// audited with cause "observed" and both identities. Answers that arrive
// for calls of an ended epoch are recorded (tool_completed, lateAnswer) and
// never forwarded.

// treeWatcher is what a Process offers when the supervisor watches its
// running tree; *supervisor.Process does.
type treeWatcher interface {
	Changes() <-chan supervisor.TreeChange
	CheckTree(ctx context.Context) (*supervisor.TreeChange, error)
}

// treeCheckTimeout bounds the tree check before a call; the check settles
// a change it sees for at most 1 s.
const treeCheckTimeout = 3 * time.Second

// lateCall is a call answered epoch_ended whose answer may still come.
type lateCall struct {
	ep   *epoch
	call *callRecord
	at   time.Time
}

// lateKeep bounds how long a late answer is waited for, and how many.
const (
	lateKeep = 10 * time.Minute
	lateMax  = 1024
)

// watchTree follows the supervisor's observations of e's process until the
// process is reaped or the session ends.
func (s *Session) watchTree(e *epoch) {
	tw, ok := e.Proc.(treeWatcher)
	if !ok {
		return
	}
	ctx := s.ctx
	go func() {
		for {
			select {
			case ch := <-tw.Changes():
				s.answeredAfterEnd(e, ch)
				s.observed(ch)
			case <-e.Proc.Done():
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

// answeredAfterEnd notes, for a change the supervisor saw on the process
// of first after its last epoch ended (a replacement came first, so the
// change starts no epoch), the other code whose output made it: the late
// answers of that epoch, recorded and never forwarded, are that code's.
// Called before the change is acknowledged, which releases that output.
func (s *Session) answeredAfterEnd(first *epoch, ch supervisor.TreeChange) {
	a := ch.Answered
	if a == nil {
		return
	}
	last := s.lastOf(first)
	s.mu.Lock()
	defer s.mu.Unlock()
	if last.ended && last.ID == ch.Previous && last.answeredBy == nil {
		last.answeredBy = &audit.Answerer{Epoch: ch.Epoch, PID: a.PID, Exe: a.Exe, SHA256: a.SHA256, Script: a.Script, ScriptSHA256: a.ScriptSHA256}
	}
}

// armTree tells the supervisor that e's process answered: from now on a
// change in its tree is a new epoch, before it the launch settling. Called
// with or without mu held: Arm does not block.
func armTree(e *epoch) {
	if a, ok := e.Proc.(interface{ Arm() }); ok {
		a.Arm()
	}
}

// lastOf returns the epoch that now runs on e's process: e, or the last
// epoch observed to succeed it.
func (s *Session) lastOf(e *epoch) *epoch {
	s.mu.Lock()
	defer s.mu.Unlock()
	for e.next != nil {
		e = e.next
	}
	return e
}

// observed turns a change the supervisor saw in the current epoch's tree
// into a new epoch on the same process. A change of an epoch that is no
// longer current (a replacement came first, or CheckTree applied it) is
// ignored.
func (s *Session) observed(ch supervisor.TreeChange) {
	s.mu.Lock()
	old := s.cur
	if old == nil || old.ended || old.ID != ch.Previous || s.state == StateEnded {
		s.mu.Unlock()
		ch.Ack()
		return
	}
	rec := old.Record
	rec.Epoch, rec.Observed = ch.Epoch, ch.New
	e := &epoch{Epoch: Epoch{ID: ch.Epoch, Record: rec, Proc: old.Proc}, observed: strings.Join(ch.What, "; ")}
	old.next = e
	s.cur = e
	s.epochs++
	s.records[e.ID] = rec
	why := "the supervisor observed a new process in the server's tree (" + strings.Join(ch.What, "; ") + ")"
	if a := ch.Answered; a != nil {
		// Output came from code other than the epoch's: what it answered
		// is recorded as that code's and never passed on.
		why = "a new program answered in the server's place (" + strings.Join(ch.What, "; ") + "); its answer was not passed on"
		old.answeredBy = &audit.Answerer{Epoch: e.ID, PID: a.PID, Exe: a.Exe, SHA256: a.SHA256, Script: a.Script, ScriptSHA256: a.ScriptSHA256}
	}
	s.state, s.reason = StateIdentityPending, why
	s.buildNote = ""
	s.closeGateLocked()
	s.mu.Unlock()
	s.changed()
	s.log.Warn("new epoch observed", "epoch", e.ID, "previous", old.ID, "what", strings.Join(ch.What, "; "))
	oldID, _ := json.Marshal(ch.Old)
	newID, _ := json.Marshal(ch.New)
	s.takeOver(takeover{
		old: old, e: e, why: why, name: "the observed epoch",
		replaced: audit.ServerReplaced{ServerLabel: s.opts.Label, AgentRun: s.opts.RunID,
			OldEpoch: old.ID, NewEpoch: e.ID, Reason: why, Cause: "observed", OldIdentity: oldID, NewIdentity: newID},
		// A new program reads the requests only when a process that
		// answered exec'd or one took the place of those that exited;
		// otherwise the program that answers did not change and keeps
		// its handshake.
		replay: ch.Restarted,
		taken:  ch.Ack,
		async:  true,
	})
}

// checkTree runs the supervisor's tree check before a call that carries
// authority (a grant, or credentials the server holds) is forwarded to e.
// When the tree changed, the new epoch is taken over at once and the call
// is refused with authorization_stale: what was approved is not what would
// answer. A check that fails closes: the call is refused, never sent
// unchecked (server_unavailable; the process is gone or its tree could not
// be read in time, so a call made a moment later meets a check that can
// succeed, or the next epoch). Only a process whose tree this system does
// not show at all (ErrTreeUnwatched: no tree view on the platform, or tree
// watching off) goes unchecked, as it was launched.
func (s *Session) checkTree(e *epoch, tool, decision string) *control.Refusal {
	if !s.carriesAuthority(decision) {
		return nil
	}
	tw, ok := e.Proc.(treeWatcher)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, treeCheckTimeout)
	defer cancel()
	ch, err := tw.CheckTree(ctx)
	if errors.Is(err, supervisor.ErrTreeUnwatched) {
		return nil
	}
	var gone *supervisor.NoAnswerError
	if errors.As(err, &gone) {
		s.log.Warn("no process answers for the epoch; the call is refused", "epoch", e.ID, "tool", tool, "err", err)
		return &control.Refusal{
			Error:  control.ServerUnavailable,
			Server: s.opts.Label,
			Tool:   tool,
			Epoch:  e.ID,
			Reason: gone.Error() + " (a watcher may be restarting the server); the call was not sent, so that no other code reads it",
			Retry:  "call again in a moment",
		}
	}
	if err != nil {
		s.log.Warn("tree check before a call failed; the call is refused", "epoch", e.ID, "tool", tool, "err", err)
		what := "its process tree could not be read (" + err.Error() + ")"
		select {
		case <-e.Proc.Done():
			what = "the server process ended"
		default:
			if errors.Is(err, context.DeadlineExceeded) {
				what = "the check did not finish within " + treeCheckTimeout.String()
			}
		}
		return &control.Refusal{
			Error:  control.ServerUnavailable,
			Server: s.opts.Label,
			Tool:   tool,
			Epoch:  e.ID,
			Reason: "the supervisor could not check which processes of the server can answer before a call carrying a grant or credentials: " + what + "; the call was not sent",
			Retry:  "call again in a moment",
		}
	}
	if ch == nil {
		return nil
	}
	go s.observed(*ch)
	s.noteStaleTold(tool, ch.Epoch)
	return &control.Refusal{
		Error:         control.AuthorizationStale,
		Server:        s.opts.Label,
		Tool:          tool,
		ApprovedEpoch: e.ID,
		CurrentEpoch:  ch.Epoch,
		Reason:        "server execution epoch changed: the supervisor observed a new process in the server's tree (" + strings.Join(ch.What, "; ") + "); the call was not sent",
		Retry:         "call again: the call will wait for the person to approve the new code",
	}
}

// rememberLateLocked keeps a call answered epoch_ended so that its answer,
// if the process still sends one, is recorded.
func (s *Session) rememberLateLocked(id int64, e *epoch, c *callRecord) {
	if c == nil {
		return
	}
	if s.late == nil {
		s.late = map[int64]lateCall{}
	}
	now := time.Now()
	for k, l := range s.late {
		if now.Sub(l.at) > lateKeep || len(s.late) >= lateMax {
			delete(s.late, k)
		}
	}
	s.late[id] = lateCall{ep: e, call: c, at: now}
}

// lateAnswer records the answer m to a call of an ended epoch as
// tool_completed with lateAnswer; it reports whether m was one. It is
// never forwarded: the agent was told epoch_ended.
func (s *Session) lateAnswer(m *mcpwire.Message) bool {
	if m == nil || m.Kind != mcpwire.KindResponse {
		return false
	}
	gid, _, ok := mcpwire.IntID(m.ID)
	if !ok {
		return false
	}
	s.mu.Lock()
	l, ok := s.late[gid]
	delete(s.late, gid)
	s.mu.Unlock()
	if !ok {
		return false
	}
	outcome, errText := "ok", ""
	switch {
	case m.Error != nil:
		outcome, errText = "rpc_error", string(mcpwire.GetPath(m.Error, "message"))
	case bytes.Equal(mcpwire.GetPath(m.Result, "isError"), []byte("true")):
		outcome = "error"
	}
	s.mu.Lock()
	by := l.ep.answeredBy
	s.mu.Unlock()
	s.log.Warn("an ended epoch answered a call; recorded, not forwarded", "epoch", l.ep.ID, "tool", l.call.tool, "outcome", outcome)
	ev := audit.ToolCompleted{
		Call: l.call.id, AgentRun: s.opts.RunID, ServerLabel: s.opts.Label, Epoch: l.ep.ID, Tool: l.call.tool,
		Outcome: outcome, DurationMS: float64(time.Since(l.call.started).Microseconds()) / 1000, Error: errText,
		LateAnswer: true, AnsweredBy: by,
	}
	go s.record(audit.TypeToolCompleted, ev)
	return true
}

// BuildStarted closes the gate at the first file-system event on a path of
// the running epoch's identity (docs/DESIGN.md "identity-pending"): calls
// are held ("build in progress") until BuildSettled says whether the
// identity changed. It does nothing unless the run is ready.
func (s *Session) BuildStarted(what string) {
	s.mu.Lock()
	if s.state != StateReady || s.cur == nil || s.cur.ended {
		s.mu.Unlock()
		return
	}
	s.buildHold = s.cur
	s.buildDone = make(chan struct{})
	s.suspectSentLocked()
	s.state, s.reason = StateIdentityPending, "build in progress: "+what+" changed; calls are held until the identity is measured"
	s.closeGateLocked()
	s.mu.Unlock()
	s.log.Info("build in progress: calls held", "what", what)
	s.changed()
}

// BuildSettled ends the hold of BuildStarted once the identity was
// measured after the settle time: changed is true when a new epoch will
// follow (Replace keeps the gate closed and opens it on the new epoch);
// false reopens the gate on the same epoch and the held calls go on.
func (s *Session) BuildSettled(changed bool) {
	s.mu.Lock()
	e := s.buildHold
	s.buildHold = nil
	if s.buildDone != nil {
		close(s.buildDone)
		s.buildDone = nil
	}
	if changed && s.cur != nil {
		// No call is written to it any more (sendSettled): the code
		// that would read it is not the epoch's.
		s.cur.superseded = true
	}
	if changed || e == nil || s.cur != e || e.ended || s.state != StateIdentityPending || s.replacing {
		s.mu.Unlock()
		return
	}
	s.state, s.reason = StateReady, ""
	s.openGateLocked()
	s.mu.Unlock()
	s.log.Info("build settled without a new identity: held calls go on")
	s.changed()
}

// TreeUnchanged checks the running epoch's process tree now: checked is
// false when it cannot be (no epoch, or the platform shows no tree);
// unchanged is true when nothing that can answer changed since the epoch
// was recorded. A change found is taken over as a new epoch, as the
// supervisor's own observations are. The status says "running server
// unchanged" only on checked && unchanged.
func (s *Session) TreeUnchanged() (checked, unchanged bool) {
	s.mu.Lock()
	e := s.cur
	ctx := s.ctx
	s.mu.Unlock()
	if e == nil || ctx == nil {
		return false, false
	}
	tw, ok := e.Proc.(treeWatcher)
	if !ok {
		return false, false
	}
	ctx, cancel := context.WithTimeout(ctx, treeCheckTimeout)
	defer cancel()
	ch, err := tw.CheckTree(ctx)
	if err != nil {
		return false, false
	}
	if ch != nil {
		go s.observed(*ch)
		return true, false
	}
	return true, true
}

// sameCodeReason words the card of a new epoch whose measured files did
// not change, claiming no more than was measured: an observed epoch names
// what the supervisor saw; a restart names what was measured. prepared is
// true when a call prepared for the old epoch was refused.
func sameCodeReason(e *epoch, prepared bool) string {
	tail := "a new process needs a new approval"
	if prepared {
		tail = "a call prepared for the old process was refused; approve the new process to continue"
	}
	if e.observed != "" {
		return "the supervisor observed a new process behind the same pipe (" + e.observed + "); no measured file changed (measured: " + measuredOf(e.Record) + "): " + tail
	}
	return "the server process was restarted; no measured file changed (measured: " + measuredOf(e.Record) + "): " + tail
}

// measuredOf lists what a record measured, for a person: "entry server.js,
// package-lock.json, node_modules".
func measuredOf(r identity.Record) string {
	var out []string
	add := func(what, p string) {
		if p != "" {
			out = append(out, strings.TrimSpace(what+" "+filepath.Base(p)))
		}
	}
	if r.Entry != "" && r.Entry != r.ResolvedExecutable.Path {
		add("executable", r.ResolvedExecutable.Path)
		add("entry", r.Entry)
	} else {
		add("executable", r.ResolvedExecutable.Path)
	}
	if r.Interpreter != nil {
		add("interpreter", r.Interpreter.Path)
	}
	add("", r.Lockfile)
	for _, w := range r.Wrappers {
		if w.Path != r.ResolvedExecutable.Path && w.Path != r.Entry {
			add("wrapper", w.Path)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.ExtraDigests)) {
		add("", k)
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, ", ")
}

// identify completes e's execution record with its observed identity
// (Epoch.Identify) off the launch's path, records server_started with it,
// and then lets the requests that need the identity through
// (awaitsIdentityLocked). The handshake and the lists do not wait for it:
// they carry no authority.
func (s *Session) identify(ctx context.Context, e *epoch) {
	done := func(obs []identity.Observed, err error) {
		s.mu.Lock()
		if err == nil && obs != nil {
			e.Record.Observed = obs
			s.records[e.ID] = e.Record
		}
		s.mu.Unlock()
		if err != nil {
			s.log.Info("the epoch's processes could not be observed", "epoch", e.ID, "err", err)
		}
		s.log.Info("epoch identified", "epoch", e.ID, "observed", len(obs))
		s.recordServerStarted(e)
		close(e.identified)
		s.changed()
	}
	if e.Identify == nil {
		done(nil, nil)
		return
	}
	f := func() {
		obs, err := e.Identify(context.WithoutCancel(ctx))
		if err == nil && e.Refetch != nil && e.Refetch() {
			s.mu.Lock()
			hsDone := s.hs.done // else its completion fetches the catalog, after this
			s.mu.Unlock()
			if hsDone {
				// What answered the catalog may have exec'd since: the
				// catalog is the epoch's once fetched from what runs now.
				s.log.Info("the epoch's program changed around its first answers; its catalog is fetched again before calls pass", "epoch", e.ID)
				s.refreshWait(e)
			}
		}
		done(obs, err)
	}
	if !s.work.goFunc(f) {
		go f() // launched after the run was over: its shutdown stops it
	}
}

// awaitsIdentityLocked returns, for a request of the agent's method, a
// channel that closes once the current epoch's identity is known, nil when
// the request need not wait: the identity is known, or method is one of
// the handshake, the lists, subscriptions/listen or ping (checkMethods),
// which carry no authority. Everything else (tools/call, resources/read,
// prompts/get, …) is answered by code whose identity the epoch must
// describe first.
func (s *Session) awaitsIdentityLocked(method string) <-chan struct{} {
	e := s.cur
	if checkMethods[method] || e == nil || e.identified == nil {
		return nil
	}
	select {
	case <-e.identified:
		return nil
	default:
		return e.identified
	}
}
