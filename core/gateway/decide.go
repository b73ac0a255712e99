package gateway

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/catalog"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/secrets"
)

// How a tools/call is decided (docs/DESIGN.md, "How a call is decided"):
// the session reads what it knows once (Session.callFacts), decideCall says
// what happens to the call, and the session does what the verdict says
// (Session.decide, handle); a call that waited for a person ends as
// decideWaited says. Both read nothing but their arguments and change
// nothing, so that table tests (decide_test.go) state every rule, the
// refusal texts included.

// callFacts is what the session knows when a tools/call arrives, read once.
type callFacts struct {
	label  string           // the server's label
	epoch  ids.EpochID      // the execution epoch the call would go to
	cat    *catalog.Catalog // its catalog revision; nil when there is none (the server judges the call)
	policy config.Policy    // the called tool's policy now
	// visible lists, sorted, the tools the agent may call now; read only
	// when cat lacks the called tool (the refusal names them).
	visible []string

	agentRev        uint64           // the catalog revision the agent last listed; 0: none
	listed          *catalog.Catalog // revision agentRev, when it is stored and is not cat
	listedThisEpoch bool             // the agent listed the tools on this epoch
	told            string           // digest of the tool's contract a refusal stated to the agent; "" when none
	staleTold       bool             // the agent was told on this epoch that its approval of the tool no longer holds

	validator *catalog.Validator // compiles and caches the tools' inputSchemas

	checked bool          // an Authority checks grants (false: the call goes unchecked)
	grants  []authz.Grant // the run's live grants
	// stale is the run's grant for the tool that an epoch change voided,
	// when no live grant of this epoch covers the tool.
	stale *authz.Grant
	// covers says whether a grant made for the tool's contract of digest
	// granted covers the tool as offered now; nil: nothing to compare.
	covers func(granted string) bool

	creds       []string                 // the server's per-call (meta) credential scopes
	askEvery    bool                     // a credential of the server asks for a decision on every use
	secretCheck func(scope string) error // whether a scope's secret can be had, without reading it; nil: not checked
	auditErr    error                    // why the audit log cannot be written now; nil when it can
}

// verdictKind is what happens to a call.
type verdictKind int

const (
	verdictForward verdictKind = iota + 1 // sent to the server
	verdictHold                           // waits for a person to decide a card
	verdictRefuse                         // answered with a refusal, not sent
)

// cardAsk is the approval card a call waits on: the pending one that shows
// this very call, or a new one (Session.requestFor). reason and stale, when
// set, are the card's (Session.card).
type cardAsk struct {
	reason string
	stale  *authz.Grant
}

// callVerdict is what decideCall decided.
type callVerdict struct {
	kind verdictKind
	// Forward: the tool_called decision (decisionAllow, decisionGrant or
	// decisionUnchecked), the grant that covers the call (a once grant is
	// spent by it) and the meta credential scopes to inject.
	decision string
	grant    *authz.Grant
	inject   []string
	// Refuse: the refusal. With ask set, a card is raised for the call at
	// once and the refusal names it (askedIn).
	refusal *control.Refusal
	// Hold, or a refusal that raises a card: the card.
	ask *cardAsk
	// What the refusal told the agent, for the next calls: the tool's
	// current contract (its digest), and that its approval no longer holds
	// on this epoch.
	toldContract string
	toldStale    bool
}

func refuseWith(r *control.Refusal) callVerdict { return callVerdict{kind: verdictRefuse, refusal: r} }

// decideCall decides tools/call c from f. The rules, in order:
//
//  1. An approve-policy tool whose grant an epoch change voided, called by
//     an agent that has not listed the tools on this epoch nor been told
//     so: authorization_stale, and a card for the new code is raised at
//     once (unless no approval could help: a credential is missing, the
//     audit log is down). An epoch change is handled before a catalog
//     change (docs/DESIGN.md, "The refresh contract").
//  2. A denied tool: approval_denied.
//  3. Without a catalog the server judges the call (go to 6).
//  4. A tool the catalog lacks: unknown_tool, or catalog_stale when the
//     agent listed an older revision; a tool changed since the revision
//     the agent listed: catalog_stale until the agent was told its current
//     contract, and after, when the call may have been formed from the old
//     contract (staleCall).
//  5. Arguments the tool's inputSchema rejects: invalid_arguments.
//  6. An allow-policy tool goes; without an Authority the call goes
//     unchecked; a live grant of this epoch that covers the tool, the
//     credentials, the arguments of a once grant and the tool's current
//     contract lets it go (unless a credential asks on every use).
//  7. Otherwise a person must decide: credential_unavailable or
//     audit_unavailable when their approval could not help, else the call
//     holds for its card.
func decideCall(f *callFacts, c *toolCall) callVerdict {
	if v, ok := staleGrant(f, c); ok {
		return v
	}
	if v, ok := checkCatalog(f, c); ok {
		return v
	}
	switch {
	case f.policy == policyAllow:
		return callVerdict{kind: verdictForward, decision: decisionAllow}
	case !f.checked:
		return callVerdict{kind: verdictForward, decision: decisionUnchecked}
	}
	if !f.askEvery {
		// A grant covers the tool only as long as its contract does not
		// widen beyond the one the card showed (grantcontract.go); a
		// grant the server's rewrite outgrew asks again, and the card
		// shows the diff.
		if g := grantFor(f, c); g != nil {
			return callVerdict{kind: verdictForward, decision: decisionGrant, grant: g, inject: grantedScopes(f.creds, g)}
		}
	}
	if r := missingCredential(f, c.name); r != nil {
		return refuseWith(r)
	}
	if r := auditDown(f, c.name); r != nil {
		return refuseWith(r)
	}
	return callVerdict{kind: verdictHold, ask: &cardAsk{}}
}

// grantFor returns the first of f's live grants that covers call c.
func grantFor(f *callFacts, c *toolCall) *authz.Grant {
	for i := range f.grants {
		if g := &f.grants[i]; g.CoversCall(f.epoch, c.name, f.creds, c.digest, f.covers) {
			return g
		}
	}
	return nil
}

// grantedScopes lists the scopes of creds that grant g covers: the meta
// credentials a call under g carries.
func grantedScopes(creds []string, g *authz.Grant) []string {
	var out []string
	for _, scope := range creds {
		if slices.Contains(g.CredentialScope, scope) {
			out = append(out, scope)
		}
	}
	return out
}

// staleGrant is rule 1 of decideCall: ok when it decides c.
func staleGrant(f *callFacts, c *toolCall) (callVerdict, bool) {
	tool := c.name
	if !f.checked || f.policy != policyApprove || f.stale == nil {
		return callVerdict{}, false
	}
	var cur catalog.Tool
	if f.cat != nil {
		var ok bool
		if cur, ok = f.cat.Lookup(tool); !ok {
			// The new code has no such tool: asking a person to approve
			// it could never help; the catalog check says what to do.
			return callVerdict{}, false
		}
	}
	if f.listedThisEpoch || f.staleTold {
		// The agent refetched, or was told once that the code changed
		// under this tool: its calls wait for the approval they need.
		return callVerdict{}, false
	}
	stale := f.stale
	r := &control.Refusal{
		Error: control.AuthorizationStale, Server: f.label, Tool: tool,
		Reason:        fmt.Sprintf("the server's code changed (execution epoch %s → %s) since the person approved %s, so the approval no longer holds and the call was not sent", stale.ExecutionEpoch, f.epoch, tool),
		ApprovedEpoch: stale.ExecutionEpoch, CurrentEpoch: f.epoch,
	}
	v := callVerdict{kind: verdictRefuse, refusal: r, toldStale: true}
	if f.cat != nil {
		// The refusal states the tool's current contract (and what
		// changed in it since the agent listed the tools), so that an
		// agent that never lists tools again can form its next call
		// from it (staleCall).
		r.Arguments = argumentShape(cur, nil)
		if f.listed != nil {
			var before *catalog.Tool
			if t, had := f.listed.Lookup(tool); had {
				before = &t
			}
			r.Problems = summaries(nonCosmetic(catalog.CompareTool(before, cur)))
		}
		v.toldContract = cur.Digest
	}
	switch missing, down := missingCredential(f, tool), auditDown(f, tool); {
	case missing != nil:
		// A request nobody could approve usefully is not raised; the
		// call after the refresh is refused for the credential.
		r.Retry = missing.Retry
	case down != nil:
		r.Retry = down.Retry
	default:
		v.ask = &cardAsk{reason: "server execution epoch changed", stale: stale}
	}
	return v, true
}

// askedIn completes the refusal of a verdict that raised a card for the
// call: it names approval request id.
func askedIn(r *control.Refusal, id ids.RequestID) {
	r.Request = id
	r.Retry = fmt.Sprintf("the person has been asked to approve the new code in Portcullis (approval request %s); call %s again once they approve, and it will wait for their decision", id, r.Tool)
}

// checkCatalog is rules 2 to 5 of decideCall: ok when they decide c.
func checkCatalog(f *callFacts, c *toolCall) (callVerdict, bool) {
	name, cat := c.name, f.cat
	if f.policy == policyDeny {
		return refuseWith(&control.Refusal{Error: control.ApprovalDenied, Server: f.label, Tool: name, Epoch: f.epoch,
			Reason: fmt.Sprintf("tool %q is denied by the person's policy for %s; the call was not sent", name, f.label),
			Retry:  "do not call this tool again; tell the person if the task needs it (they can change its policy in Portcullis)"}), true
	}
	if cat == nil {
		return callVerdict{}, false // no catalog (fallback): the server judges
	}
	tool, ok := cat.Lookup(name)
	if !ok {
		offered := offeredNames(f.visible)
		if f.agentRev == cat.Revision {
			// The agent has the current list: the name is simply not in it.
			return refuseWith(&control.Refusal{Error: control.UnknownTool, Server: f.label, Tool: name, CurrentEpoch: f.epoch,
				AgentRevision: f.agentRev, CurrentRevision: cat.Revision,
				Reason: fmt.Sprintf("there is no tool %q in catalog revision %d", name, cat.Revision),
				Retry:  "call one of the tools the server offers: " + offered}), true
		}
		return refuseWith(&control.Refusal{Error: control.CatalogStale, Server: f.label, Tool: name, CurrentEpoch: f.epoch,
			AgentRevision: f.agentRev, CurrentRevision: cat.Revision,
			Reason: fmt.Sprintf("tool %q is no longer offered: catalog revision %d, which the server answers with now, does not have it", name, cat.Revision),
			Retry:  "do not call it again; the tools offered now are " + offered}), true
	}
	if f.agentRev != 0 && f.agentRev != cat.Revision {
		if v, ok := staleCall(f, c, tool); ok {
			return v, true
		}
	}
	if err := f.validator.Validate(*cat, name, c.args); err != nil {
		var ae *catalog.ArgumentError
		switch {
		case errors.As(err, &ae):
			return refuseWith(&control.Refusal{Error: control.InvalidArguments, Server: f.label, Tool: name, CurrentEpoch: f.epoch,
				AgentRevision: f.agentRev, CurrentRevision: cat.Revision, Problems: ae.Problems,
				Arguments: argumentShape(tool, catalog.ProblemProperties(ae.Problems)),
				Reason:    fmt.Sprintf("the arguments do not fit the inputSchema of %q in catalog revision %d", name, cat.Revision),
				Retry:     "fix the arguments to fit the current arguments given here, then call again"}), true
		case errors.Is(err, catalog.ErrInvalidSchema):
			return callVerdict{}, false // the server judges the arguments
		}
		return refuseWith(&control.Refusal{Error: control.CatalogStale, Server: f.label, Tool: name, CurrentEpoch: f.epoch,
			AgentRevision: f.agentRev, CurrentRevision: cat.Revision, Reason: err.Error(),
			Retry: "form the call again from the current arguments given here"}), true
	}
	return callVerdict{}, false
}

// staleCall judges call c of tool (as f.cat offers it) from an agent that
// last listed revision f.agentRev, older than f.cat: ok with the refusal
// when the call cannot be judged on the current contract (the checks that
// follow — validation, policy, grant — apply otherwise).
//
// A tool that changed (beyond cosmetics) since agentRev is catalog_stale
// until the agent has been told its current contract: the refusal states
// it (every argument, compactly, and what changed), and the session
// remembers that the agent was told that contract. From then on a call of
// the tool is judged on the current contract — agents that never list
// tools again mid-session can go on — unless the change could alter what
// the call does without the call showing it (catalog.Unseen): it omits an
// argument whose default changed, or it fits the contract the agent listed
// too and the same arguments mean something else now. Those stay
// catalog_stale, saying which change and the step to take.
func staleCall(f *callFacts, c *toolCall, tool catalog.Tool) (callVerdict, bool) {
	name, cat, agentRev, old := c.name, f.cat, f.agentRev, f.listed
	var before *catalog.Tool
	var changes []catalog.Change
	if old != nil {
		if t, had := old.Lookup(name); had {
			if t.Digest == tool.Digest {
				return callVerdict{}, false
			}
			before = &t
		}
		changes = nonCosmetic(catalog.CompareTool(before, tool))
		if len(changes) == 0 {
			return callVerdict{}, false
		}
	}
	r := &control.Refusal{Error: control.CatalogStale, Server: f.label, Tool: name, CurrentEpoch: f.epoch,
		AgentRevision: agentRev, CurrentRevision: cat.Revision, Problems: summaries(changes),
		Arguments: argumentShape(tool, nil)}
	v := refuseWith(r)
	switch {
	case old == nil:
		r.Reason = fmt.Sprintf("catalog revision %d, which the agent last fetched, is no longer known; the current revision is %d", agentRev, cat.Revision)
		// Nothing to compare the call with: only a new tools/list helps.
		r.Retry = fmt.Sprintf("list the tools again (tools/list) and form the call from the current contract of %s; if the agent cannot list tools mid-session, tell the person that %s changed and the agent must reconnect to use it", name, name)
		return v, true
	case before == nil:
		r.Reason = fmt.Sprintf("tool %q was added after catalog revision %d, which the agent last fetched; the current revision is %d", name, agentRev, cat.Revision)
	default:
		r.Reason = fmt.Sprintf("tool %q changed since catalog revision %d, which the agent last fetched; the current revision is %d", name, agentRev, cat.Revision)
	}
	if f.told != tool.Digest {
		r.Retry = "form the call again from the current arguments given here: a call formed from them is judged on them, without listing the tools again"
		v.toldContract = tool.Digest
		return v, true
	}
	// The agent was told the current contract: the call is judged on it.
	if err := f.validator.Validate(*cat, name, c.args); err != nil {
		return callVerdict{}, false // invalid_arguments (or the server judges) follows
	}
	// Fits the older contract too (a schema that cannot be compiled may
	// accept it: counted as fitting), and sets nothing only the current
	// one has: it may have been formed from the older contract.
	oldErr := error(nil)
	if before != nil {
		oldErr = f.validator.Validate(*old, name, c.args)
	}
	fromOld := before != nil && (oldErr == nil || errors.Is(oldErr, catalog.ErrInvalidSchema)) && !setsAdded(changes, c.args)
	unseen := catalog.Unseen(changes, c.args, fromOld)
	if len(unseen) == 0 {
		return callVerdict{}, false
	}
	r.Problems = summaries(unseen)
	if omitted, only := omittedDefaults(unseen, c.args); only {
		r.Reason = fmt.Sprintf("tool %q changed since catalog revision %d, which the agent last fetched, and this call omits %s, whose default changed: the call would do what it does not show", name, agentRev, quoteList(omitted))
		r.Retry = fmt.Sprintf("send the call again with %s set explicitly (the current arguments are given here)", quoteList(omitted))
		return v, true
	}
	r.Reason = fmt.Sprintf("tool %q changed since catalog revision %d, which the agent last fetched; this call fits that revision too, and what the same arguments do changed since, so it may have been formed from the old contract", name, agentRev)
	r.Retry = fmt.Sprintf("list the tools again (tools/list) and form the call from the current contract of %s; if the agent cannot list tools mid-session, tell the person that %s changed and the agent must reconnect to use it", name, name)
	return v, true
}

// offeredNames lists, for a refusal, the tools the agent may call (at most
// 20 names).
func offeredNames(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	if len(names) > 20 {
		return strings.Join(names[:20], ", ") + fmt.Sprintf(" and %d more", len(names)-20)
	}
	return strings.Join(names, ", ")
}

// missingCredential refuses a call whose credential scopes include one
// whose secret cannot be had whatever a person decides, before anyone is
// asked to approve it. A locked keychain is not missing.
func missingCredential(f *callFacts, tool string) *control.Refusal {
	if f.secretCheck == nil {
		return nil
	}
	for _, scope := range f.creds {
		if err := f.secretCheck(scope); err != nil && !errors.Is(err, secrets.ErrLocked) {
			return &control.Refusal{Error: control.CredentialUnavailable, Server: f.label, Tool: tool, CurrentEpoch: f.epoch,
				Reason: fmt.Sprintf("credential scope %q cannot be had: %v", scope, err),
				Retry:  credentialAdvice(scope, err)}
		}
	}
	return nil
}

// auditDown refuses a call before a person is asked to approve it when the
// audit log cannot be written: the approval could not be recorded, nor the
// call's intent.
func auditDown(f *callFacts, tool string) *control.Refusal {
	if f.auditErr == nil {
		return nil
	}
	return &control.Refusal{Error: control.AuditUnavailable, Server: f.label, Tool: tool, CurrentEpoch: f.epoch,
		Reason: "the audit log cannot be written (" + f.auditErr.Error() + "), so no approval is asked and no call is forwarded",
		Retry:  "tell the person that Portcullis cannot write its audit log (they should check the disk and the data directory), then call again"}
}

// unreadableCredential refuses a call whose granted credential scope's
// secret cannot be read as it is sent: nothing is ever forwarded with an
// empty secret in its place.
func unreadableCredential(label string, epoch ids.EpochID, tool, scope string, err error) *control.Refusal {
	return &control.Refusal{Error: control.CredentialUnavailable, Server: label, Tool: tool, CurrentEpoch: epoch,
		Reason: fmt.Sprintf("credential scope %q cannot be read: %v", scope, err),
		Retry:  credentialAdvice(scope, err)}
}

// waited is how a call's wait for a person ended (Session.awaitApproval),
// once its tool's policy still asks for approval and no new card is due.
type waited struct {
	label, tool string
	epoch       ids.EpochID   // the epoch the call was decided on
	request     ids.RequestID // the approval request it waited on last
	grant       *authz.Grant  // the grant the decision made; nil when err is set
	err         error         // why there is no grant
	timeout     time.Duration // how long a request waits for a person
	ended       bool          // epoch ended while the call waited
	current     ids.EpochID   // the epoch running now; "" when none
	creds       []string      // the server's meta credential scopes
}

// decideWaited decides a call whose wait for a person ended as w says: it
// goes under the grant made (with the meta credentials it covers), or is
// refused, saying who decided what.
func decideWaited(w waited) callVerdict {
	tool, id := w.tool, w.request
	r := &control.Refusal{Server: w.label, Tool: tool, CurrentEpoch: w.epoch, Request: id}
	switch err := w.err; {
	case err == nil:
	case errors.Is(err, authz.ErrTimeout):
		r.Error = control.ApprovalTimeout
		r.Reason = fmt.Sprintf("nobody answered approval request %s for %s within %s; the call was not sent", id, tool, w.timeout)
		r.Retry = fmt.Sprintf("tell the person that %s on %s needs their approval in Portcullis (its window or `portcullis approve`), and call again when they say they are ready to approve it", tool, w.label)
		return refuseWith(r)
	case errors.Is(err, authz.ErrUnrecorded):
		r.Error, r.Request = control.AuditUnavailable, ""
		r.Reason = fmt.Sprintf("the person approved request %s, but the audit log could not record it, so nothing was granted and the call was not sent", id)
		r.Retry = "tell the person that Portcullis cannot write its audit log (they should check the disk and the data directory), then call again"
		return refuseWith(r)
	case errors.Is(err, authz.ErrWithdrawn):
		// Nobody decided: the request was withdrawn (the run ended, the
		// call was cancelled, or the policy changed under it).
		r.Error = control.ApprovalDenied
		r.Reason = fmt.Sprintf("approval request %s was withdrawn before a person decided it; the call was not sent", id)
		r.Retry = "call again if the tool is still needed: the person will be asked again"
		return refuseWith(r)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// The run is ending (its agent left, or its input ended and the
		// drain is over): nobody decided, and nobody will.
		r.Error = control.ApprovalDenied
		r.Reason = fmt.Sprintf("approval request %s was withdrawn before a person decided it: the agent run ended", id)
		r.Retry = "none in this agent run, which is over"
		return refuseWith(r)
	default:
		r.Error = control.ApprovalDenied
		r.Reason = fmt.Sprintf("the person denied approval request %s for %s; the call was not sent", id, tool)
		r.Retry = fmt.Sprintf("tell the person that %s was not run because they denied it; do not call it again unless they ask you to", tool)
		return refuseWith(r)
	}
	g := w.grant
	switch {
	case !w.ended && g.ExecutionEpoch == w.epoch && !g.Covers(tool, nil):
		// Same epoch: the grant simply leaves this call's tool out.
		r.Error, r.CurrentEpoch = control.ApprovalDenied, w.current
		r.Reason = fmt.Sprintf("the person approved other tools in request %s, not %s; the call was not sent", id, tool)
		r.Retry = fmt.Sprintf("tell the person that %s was not approved; do not call it again unless they ask you to", tool)
		return refuseWith(r)
	case w.ended || g.ExecutionEpoch != w.epoch || !g.Covers(tool, nil):
		r.Error, r.CurrentEpoch, r.ApprovedEpoch = control.AuthorizationStale, w.current, g.ExecutionEpoch
		r.Reason = fmt.Sprintf("the server's code changed (execution epoch %s ended) while the call waited for approval, so the approval given is for code that no longer runs and the call was not sent", w.epoch)
		r.Retry = fmt.Sprintf("call %s again: it will wait for the person to approve the new code", tool)
		return refuseWith(r)
	}
	return callVerdict{kind: verdictForward, decision: decisionGrant, grant: g, inject: grantedScopes(w.creds, g)}
}

// deniedWhileWaiting refuses a call whose tool the person's policy denied
// while the call waited for approval: deny wins over any approval given
// meanwhile.
func deniedWhileWaiting(label string, epoch ids.EpochID, tool string) *control.Refusal {
	return &control.Refusal{Error: control.ApprovalDenied, Server: label, Tool: tool, CurrentEpoch: epoch,
		Reason: fmt.Sprintf("tool %q was denied by the person's policy for %s while the call waited for approval; the call was not sent", tool, label),
		Retry:  "do not call this tool again; tell the person if the task needs it (they can change its policy in Portcullis)"}
}
