package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/mcpwire"
	"github.com/portcullis/portcullis/core/secrets"
)

// Credential is one credential scope a server may receive, as the
// configuration declares it. Secrets are fetched only after the grant check.
type Credential struct {
	Scope       string
	Inject      string // "env" (at launch) or "meta" (per call)
	EnvVar      string
	AskEveryUse bool
}

// SecretSource reads a credential scope's secret from the keychain.
type SecretSource func(scope string) ([]byte, error)

// metaCredentialKey is the params._meta key under which "meta" credentials
// reach a tools/call: an object mapping scope name to secret. The reverse-DNS
// prefix follows the MCP _meta naming rules (basic/index, "_meta").
const metaCredentialKey = "dev.portcullis/credentials"

// callFacts reads what the session knows for call c on e, once (see
// decideCall): its own state under one lock, the tool's policy once, e's
// catalog once.
func (s *Session) callFacts(e *epoch, c *toolCall) callFacts {
	f := callFacts{label: s.opts.Label, epoch: e.ID, policy: s.policy(c.name), validator: s.opts.Validator,
		checked: s.opts.Authority != nil, secretCheck: s.opts.SecretCheck}
	f.creds, f.askEvery = s.metaCredentials()
	s.mu.Lock()
	f.cat = e.catalog
	f.agentRev = s.agentRev
	f.listedThisEpoch = s.agentListedEpoch == e.ID
	f.told = s.told[c.name]
	f.staleTold = s.staleTold[c.name] == e.ID
	s.mu.Unlock()
	a := s.opts.Authority
	if f.cat != nil {
		cur, ok := f.cat.Lookup(c.name)
		switch {
		case !ok:
			f.visible = s.visibleTools(f.cat)
		case a != nil && f.policy == policyApprove:
			f.covers = s.contractJudgeOf(c.name, cur)
		}
		if f.agentRev != 0 && f.agentRev != f.cat.Revision {
			if old, ok := s.opts.Catalog.Get(s.opts.Label, f.agentRev); ok {
				f.listed = &old
			}
		}
	}
	if a != nil && f.policy == policyApprove {
		f.grants = a.Grants(s.opts.RunID)
		f.stale = a.Stale(s.opts.RunID, e.ID, c.name)
	}
	if h, ok := s.opts.Audit.(auditHealth); ok {
		f.auditErr = h.Err()
	}
	return f
}

// decide decides call c on e (decideCall) and remembers what a refusal
// told the agent. A once grant the verdict uses is spent here: when
// another call spent it first, c is decided again without it.
func (s *Session) decide(e *epoch, c *toolCall) callVerdict {
	f := s.callFacts(e, c)
	return s.decideFrom(&f, c)
}

// decideFrom is decide on facts f, read before.
func (s *Session) decideFrom(f *callFacts, c *toolCall) callVerdict {
	for {
		v := decideCall(f, c)
		if v.toldContract != "" {
			s.noteTold(c.name, v.toldContract)
		}
		if v.toldStale {
			s.noteStaleTold(c.name, f.epoch)
		}
		if v.grant == nil || v.grant.ExpiresWhen != authz.ExpiresOnce || s.opts.Authority.Consume(s.opts.RunID, v.grant.ID) {
			return v
		}
		spent := v.grant.ID
		f.grants = slices.DeleteFunc(f.grants, func(g authz.Grant) bool { return g.ID == spent })
	}
}

// authorize does what verdict v says for call c on e: the call to forward,
// credentials injected, the approval request it waits on (a pending one
// that shows it, or a new card), or the refusal.
func (s *Session) authorize(e *epoch, c *toolCall, v callVerdict) authorization {
	switch v.kind {
	case verdictRefuse:
		return refused(v.refusal)
	case verdictHold:
		return authorization{wait: s.requestFor(e, c, v.ask.reason, v.ask.stale)}
	}
	out, r := s.injectMeta(e, c, v.inject)
	if r != nil {
		return refused(r)
	}
	auth := authorization{decision: v.decision, out: out}
	if v.grant != nil {
		auth.grant = v.grant.ID
	}
	return auth
}

// shown reports whether approval request id was raised for call c: its
// card showed this very call.
func (s *Session) shown(id ids.RequestID, c *toolCall) bool {
	card, ok := s.opts.Authority.CardOf(id)
	return ok && card.Shows(s.opts.RunID, c.name, c.digest)
}

// lockedCredentials lists the scopes whose keychain is locked now, for the
// card: approving is useless until the person unlocks it.
func (s *Session) lockedCredentials(scopes []string) []string {
	var out []string
	for _, scope := range scopes {
		if s.opts.SecretCheck != nil && errors.Is(s.opts.SecretCheck(scope), secrets.ErrLocked) {
			out = append(out, scope)
		}
	}
	return out
}

// credentialAdvice is what the agent should ask of the person when scope's
// secret cannot be had for err.
func credentialAdvice(scope string, err error) string {
	switch {
	case errors.Is(err, secrets.ErrLocked):
		return "ask the person to unlock the keychain, then call again"
	case errors.Is(err, secrets.ErrUnavailable):
		return "ask the person to start the system keychain, then call again"
	}
	return "ask the person to store the credential (portcullis creds set " + scope + "), then call again"
}

// noteStaleTold records that the agent was told that tool's approval no
// longer holds on epoch: its next calls of tool there wait for approval.
func (s *Session) noteStaleTold(tool string, epoch ids.EpochID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.staleTold == nil {
		s.staleTold = map[string]ids.EpochID{}
	}
	s.staleTold[tool] = epoch
}

// policyRecheck is how often a call waiting for a person re-checks its
// tool's policy by itself, in case no PolicyChanged tells it (the
// configuration file's watcher may be unavailable).
const policyRecheck = 2 * time.Second

// errPolicyWake says a wait for a decision was interrupted so that the call
// re-checks its tool's policy.
var errPolicyWake = errors.New("re-check the tool's policy")

// awaitApproval holds a call until the person decides request id (or it
// times out), then returns the authorization of the call. While it waits,
// the call re-checks its tool's policy whenever PolicyChanged runs and
// every policyRecheck: a tool denied meanwhile refuses the call at once,
// one allowed meanwhile lets it go without a grant; either way a request
// no call waits on any more is withdrawn. A request withdrawn under a call
// that still needs a decision (another call's tool was denied) is raised
// again for it.
func (s *Session) awaitApproval(e *epoch, c *toolCall, id ids.RequestID) authorization {
	m, tool := c.msg, c.name
	a := s.opts.Authority
	progress := s.progressWhileWaiting(c, id)
	defer progress.stop()
	var g *authz.Grant
	var err error
wait:
	for {
		g, err = s.waitDecision(id, tool)
		if s.runCtx().Err() != nil {
			break
		}
		pol := s.policy(tool)
		if pol == policyDeny {
			// The person denied the tool in the configuration while the
			// call waited: deny wins over any approval given meanwhile.
			s.stopWaiting(m, id, fmt.Sprintf("the person's policy denies %s now", tool))
			s.withdrawDenied()
			return refused(deniedWhileWaiting(s.opts.Label, e.ID, tool))
		}
		if pol == policyAllow && (err == nil || errors.Is(err, errPolicyWake) || errors.Is(err, authz.ErrWithdrawn) || errors.Is(err, authz.ErrTimeout)) {
			// Allowed while the call waited (and no person denied it):
			// it goes as an allowed call does, without a grant.
			s.stopWaiting(m, id, fmt.Sprintf("the person's policy allows %s now", tool))
			if err == nil && g.ExpiresWhen == authz.ExpiresOnce {
				a.Consume(s.opts.RunID, g.ID) // it was for this call
			}
			return authorization{decision: decisionAllow, out: m.Raw}
		}
		switch {
		case errors.Is(err, errPolicyWake):
			continue
		case errors.Is(err, authz.ErrWithdrawn) && !s.ended(e) && s.waitingOn(m, id):
			// Withdrawn under this call (a tool of its scope was denied):
			// it asks again, with the scope in force now.
		case err == nil && g.ExecutionEpoch == e.ID && !g.Covers(tool, nil) && !s.ended(e) && !s.shown(id, c):
			// Approved for other tools by a person who never saw this
			// call (it waited on a request raised for another call):
			// it asks for itself.
		case err == nil && g.ExpiresWhen == authz.ExpiresOnce && g.ArgsDigest != "" && g.ArgsDigest != c.digest && !s.ended(e):
			// Approved once for the call its card showed, another call
			// of the tool with other arguments: this one asks for itself.
		case err == nil && g.ExecutionEpoch == e.ID && g.Covers(tool, nil) && !s.contractHolds(e, g, tool) && !s.ended(e):
			// Approved for the tool as its card showed it, but the server
			// rewrote the tool meanwhile beyond that contract: the call
			// asks again, on a card showing what changed. A once grant
			// made for it is spent with the decision.
			if g.ExpiresWhen == authz.ExpiresOnce {
				a.Consume(s.opts.RunID, g.ID)
			}
			next := a.Raise(s.card(e, c, "", nil, g))
			s.moveWaiting(m, id, next)
			id = next
			progress.move(id)
			continue
		case err == nil && g.ExpiresWhen == authz.ExpiresOnce && g.ExecutionEpoch == e.ID && !a.Consume(s.opts.RunID, g.ID) && !s.ended(e):
			// A once grant serves one call: another call that waited on
			// the same request (or took the grant through Check) spent it,
			// so this one asks again, while its epoch still runs.
		default:
			break wait
		}
		next := s.requestFor(e, c, "", nil)
		s.moveWaiting(m, id, next)
		id = next
		progress.move(id)
	}
	s.mu.Lock()
	w := waited{label: s.opts.Label, tool: tool, epoch: e.ID, request: id, grant: g, err: err,
		timeout: a.Timeout(), ended: e.ended}
	if s.cur != nil {
		w.current = s.cur.ID
	}
	s.mu.Unlock()
	w.creds, _ = s.metaCredentials()
	return s.authorize(e, c, decideWaited(w))
}

// runCtx is the context of the run (cancelled when Serve returns).
func (s *Session) runCtx() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ctx
}

// waitDecision waits for the decision on request id like Authority.Wait,
// but returns errPolicyWake when tool's policy is no longer config.PolicyApprove, when
// PolicyChanged runs or when policyRecheck has passed, so that the caller
// re-checks the policy.
func (s *Session) waitDecision(id ids.RequestID, tool string) (*authz.Grant, error) {
	s.mu.Lock()
	run, wake := s.ctx, s.policyWakeLocked()
	s.mu.Unlock()
	// Asked after the channel is taken: a change that PolicyChanged
	// reports from now on closes it, and one before is seen here.
	if s.policy(tool) != policyApprove {
		return nil, errPolicyWake
	}
	ctx, cancel := context.WithCancel(run)
	defer cancel()
	t := time.AfterFunc(policyRecheck, cancel)
	defer t.Stop()
	go func() {
		select {
		case <-wake:
			cancel()
		case <-ctx.Done():
		}
	}()
	g, err := s.opts.Authority.WaitRun(ctx, id, s.opts.RunID)
	if err != nil && errors.Is(err, context.Canceled) && run.Err() == nil {
		return nil, errPolicyWake
	}
	return g, err
}

// waiterLocked returns the in-flight entry of call m while it waits on
// approval request id, or nil (it was cancelled or ended, or waits on
// another request).
func (s *Session) waiterLocked(m *mcpwire.Message, id ids.RequestID) *pending {
	_, p, ok := s.flight.ofAgent(m.ID)
	if !ok {
		return nil
	}
	if p != nil && p.approval == id {
		return p
	}
	return nil
}

// waitingOn reports whether call m still waits on approval request id.
func (s *Session) waitingOn(m *mcpwire.Message, id ids.RequestID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiterLocked(m, id) != nil
}

// moveWaiting records that call m now waits on approval request to instead
// of from (so that a cancellation withdraws the right one).
func (s *Session) moveWaiting(m *mcpwire.Message, from, to ids.RequestID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.waiterLocked(m, from); p != nil {
		p.approval = to
	}
}

// stopWaiting records that call m no longer waits on approval request id
// (its tool's policy decided it) and withdraws the request, saying why,
// when no other call waits on it: a person is not asked about calls that
// no longer need them. A request other calls still wait on stays.
func (s *Session) stopWaiting(m *mcpwire.Message, id ids.RequestID, why string) {
	s.mu.Lock()
	if p := s.waiterLocked(m, id); p != nil {
		p.approval = ""
	}
	waited := s.flight.awaiting(id)
	s.mu.Unlock()
	if waited {
		return
	}
	if err := s.opts.Authority.WithdrawRun(id, s.opts.RunID, why); err == nil {
		s.log.Info("approval request withdrawn: no call waits on it any more", "request", id, "why", why)
	}
}

// ended reports whether e has ended.
func (s *Session) ended(e *epoch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.ended
}

// metaCredentials lists the server's per-call credential scopes and whether
// any credential of the server demands a decision on every use. An "env"
// credential counts too: the process holds it, so every call it serves
// uses it.
func (s *Session) metaCredentials() (scopes []string, askEvery bool) {
	for _, c := range s.opts.Credentials {
		if c.Inject == "meta" {
			scopes = append(scopes, c.Scope)
		}
		askEvery = askEvery || c.AskEveryUse
	}
	return scopes, askEvery
}

// injectMeta puts the secrets of the meta credential scopes into the
// forwarded call's params._meta. A secret that cannot be read refuses the
// call: nothing is ever forwarded with an empty secret in its place.
func (s *Session) injectMeta(e *epoch, c *toolCall, scopes []string) ([]byte, *control.Refusal) {
	m, tool := c.msg, c.name
	if len(scopes) == 0 {
		return m.Raw, nil
	}
	vals := map[string]string{}
	for _, scope := range scopes {
		var secret []byte
		var err error
		if s.opts.Secrets == nil {
			err = errors.New("no credential store")
		} else {
			secret, err = s.opts.Secrets(scope)
		}
		if err == nil && len(secret) == 0 {
			err = errors.New("the stored secret is empty")
		}
		if err != nil {
			return nil, unreadableCredential(s.opts.Label, e.ID, tool, scope, err)
		}
		vals[scope] = string(secret)
	}
	b, _ := json.Marshal(vals)
	out, err := mcpwire.SetPath(m.Raw, []string{"params", "_meta", metaCredentialKey}, b)
	if err != nil {
		return nil, &control.Refusal{Error: control.CredentialUnavailable, Server: s.opts.Label, Tool: tool, Reason: "the call's params cannot carry credentials: " + err.Error()}
	}
	return out, nil
}

// requestFor returns the pending approval request call c waits on, raising
// one with a full card when none covers it; reason and stale, when set, are
// the card's (see card).
func (s *Session) requestFor(e *epoch, c *toolCall, reason string, stale *authz.Grant) ids.RequestID {
	a := s.opts.Authority
	creds, askEvery := s.metaCredentials()
	if !askEvery {
		if id, ok := a.Find(s.opts.RunID, e.ID, c.name, creds, c.digest); ok {
			return id
		}
	}
	return a.Raise(s.card(e, c, reason, stale, nil))
}

// card builds the approval card for call c on e: why it is asked (reason,
// or one the card works out), the grant of an older epoch a call prepared
// for it was refused for (stale, nil when none), and the grant of e whose
// contract for the tool the server outgrew (outgrown; nil: a live one, if
// any, is looked up).
func (s *Session) card(e *epoch, call *toolCall, reason string, stale, outgrown *authz.Grant) authz.Card {
	tool := call.name
	creds, askEvery := s.metaCredentials()
	s.mu.Lock()
	cat := e.catalog
	approvedEpoch, approvedRev := s.approvedEpoch, s.approvedRev
	prevRec, hasPrev := s.records[approvedEpoch]
	agentName := s.hs.clientName()
	s.mu.Unlock()
	prev := stale
	if prev == nil && approvedEpoch != e.ID {
		// A call held after the agent refetched: the grant the epoch
		// change voided is what the person approved before.
		prev = s.opts.Authority.Stale(s.opts.RunID, e.ID, tool)
	}
	if prev != nil {
		approvedEpoch = prev.ExecutionEpoch
		prevRec, hasPrev = s.recordOf(approvedEpoch)
	}
	args := call.args
	c := authz.Card{
		AgentRun: s.opts.RunID, AgentExe: s.opts.Agent.Exe, AgentPID: s.opts.Agent.PID, AgentName: agentName,
		ServerLabel: s.opts.Label, PreviousEpoch: approvedEpoch, CurrentEpoch: e.ID,
		Tool: tool, Arguments: json.RawMessage(args), ArgsDigest: call.digest, CredentialScope: creds, AskEveryUse: askEvery,
		ApprovedRevision: approvedRev, Code: authz.IdentityDigest(e.Record),
	}
	if hasPrev && approvedEpoch != e.ID {
		c.IdentityChanges = identity.Diff(prevRec, e.Record)
	}
	var offered []string
	if cat != nil {
		c.CatalogRevision = cat.Revision
		for _, t := range cat.Tools {
			if s.policy(t.Name) == policyApprove {
				offered = append(offered, t.Name)
			}
		}
		if t, ok := cat.Lookup(tool); ok {
			c.Defaults = catalog.Defaults(t, args)
		}
		if approvedRev != 0 && approvedRev != cat.Revision {
			if old, ok := s.opts.Catalog.Get(s.opts.Label, approvedRev); ok {
				c.CatalogChanges = catalog.Compare(old, *cat).Changes
			}
		}
	}
	// A grant of this epoch whose contract for the tool the server has
	// since outgrown: the card shows the tool's diff from the contract
	// that was approved.
	var contractDiff []catalog.Change
	if outgrown == nil {
		outgrown, contractDiff = s.outgrown(e, tool)
	} else if cur, ok := s.currentTool(e, tool); ok {
		contractDiff, _ = s.contractChanges(tool, outgrown.Contract(tool), cur)
	}
	if outgrown != nil {
		others := slices.DeleteFunc(slices.Clone(c.CatalogChanges), func(ch catalog.Change) bool { return ch.Tool == tool })
		c.CatalogChanges = append(contractDiff, others...)
	}
	// The card proposes the called tool, or after a rebuild what the
	// person chose for the previous epoch; other tools stay unticked.
	c = s.opts.Authority.Propose(c, offered)
	c.Stale = stale != nil
	c.ToolContracts = toolContracts(cat, c.Offered())
	switch {
	case reason != "":
		c.Reason = reason
	case outgrown != nil && !askEvery:
		c.Reason, c.Rewritten = outgrownReason(tool, contractDiff), true
	case askEvery:
		c.Reason = "a credential of this server asks for approval on every use"
	case approvedEpoch != "" && approvedEpoch != e.ID && hasPrev && len(c.IdentityChanges) == 0:
		c.Reason = sameCodeReason(e, false)
	case approvedEpoch != "" && approvedEpoch != e.ID:
		c.Reason = "server execution epoch changed: new code asks for the authority you gave the old code"
	case approvedEpoch != "":
		c.Reason = fmt.Sprintf("%s is not covered by what you approved for this run", tool)
	default:
		c.Reason = fmt.Sprintf("first use of %s in this agent run", tool)
	}
	if c.Reason == "server execution epoch changed" {
		c.Reason = "server execution epoch changed: a call prepared for the old code was refused; approve the new code to continue"
		if hasPrev && len(c.IdentityChanges) == 0 {
			c.Reason = sameCodeReason(e, true)
		}
	}
	if locked := s.lockedCredentials(creds); len(locked) > 0 {
		c.Reason += fmt.Sprintf(" (the keychain holding %s is locked: unlock it before you approve, or the call fails)", strings.Join(locked, ", "))
	}
	return c
}

// recordOf returns the execution record of an epoch this run has seen.
func (s *Session) recordOf(epochID ids.EpochID) (identity.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[epochID]
	return r, ok
}

// waitProgress tells an agent that supplied a progress token that its call
// waits for a person (MCP basic/utilities/progress): at once, then every 15 s,
// and at once again when the call moves to a new approval request; each
// message names the request the call waits on then.
type waitProgress struct {
	moved    chan ids.RequestID
	cancel   context.CancelFunc
	released func() // tells the shim the wait ended; nil: nothing to tell
}

// progressWhileWaiting starts the progress messages of call c, which waits
// on approval request id. Without a progress token it sends nothing.
// A shim that reads shim lines (Options.ShimLines) is told too, so that it
// can word the refusal of the call should the daemon go away meanwhile.
func (s *Session) progressWhileWaiting(c *toolCall, id ids.RequestID) *waitProgress {
	p := &waitProgress{moved: make(chan ids.RequestID, 1), cancel: func() {}}
	if s.opts.ShimLines && c.msg.ID != nil {
		s.writeAgent(control.HeldLine(c.msg.ID))
		p.released = func() { s.writeAgent(control.ReleasedLine(c.msg.ID)) }
	}
	token := c.token
	if token == nil {
		return p
	}
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(s.ctx)
	send := func(n int, request ids.RequestID) {
		b, err := mcpwire.NewNotification(methodProgress, map[string]any{
			"progressToken": json.RawMessage(token), "progress": n,
			"message": fmt.Sprintf("waiting for a person to approve this call in Portcullis (request %s)", request),
		})
		if err == nil {
			s.writeAgent(b)
		}
	}
	go func() {
		t := time.NewTicker(15 * time.Second)
		defer t.Stop()
		// progress increases with each message, as the spec requires.
		for n := 0; ; n++ {
			send(n, id)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case id = <-p.moved:
				t.Reset(15 * time.Second)
			}
		}
	}()
	return p
}

// move says that the call now waits on approval request id.
func (p *waitProgress) move(id ids.RequestID) {
	select {
	case <-p.moved: // an older move not yet sent: this one replaces it
	default:
	}
	p.moved <- id
}

// stop ends the messages.
func (p *waitProgress) stop() {
	p.cancel()
	if p.released != nil {
		p.released()
	}
}

// NoteGranted remembers the epoch and catalog revision a person approved,
// for the next card's "what changed".
func (s *Session) NoteGranted(g authz.Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.approvedEpoch = g.ExecutionEpoch
	if s.cur != nil && s.cur.ID == g.ExecutionEpoch && s.cur.catalog != nil {
		s.approvedRev = s.cur.catalog.Revision
	}
}
